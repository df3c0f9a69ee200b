"""Weight averages for a component whose optimizer keeps none.

spaCy's optimizer can average every weight it updates (``[training.optimizer] use_averages = true``):
``spacy train`` then evaluates and saves the averages. The configs ``spacy init config`` writes turn that
off. With ``average_params`` a component averages anyway, in one of two ways:

- With its own encoder, it keeps the same average of its own weights (:class:`ParamAverages`) and tags and
  saves with it; nothing else in the pipeline changes.
- Listening to a shared ``tok2vec``, it turns the optimizer's averaging on at its first update
  (:func:`average_the_pipeline`), which then averages as ``use_averages = true`` would: the ``tok2vec`` is
  another component's, and an averaged head must read an averaged ``tok2vec`` (a head averaged alone over a
  ``tok2vec`` that kept moving lost 0.53 for nldm_tagger on Twitter; results/spacy_train_diagnosis.md).
  ``spacy train`` then evaluates and saves every component with its averages, as it does with
  ``use_averages = true``.

With an optimizer that averages already, the component leaves it to the optimizer.
"""
import copy
import logging
import threading
from typing import Dict, Hashable, Optional, Tuple

from thinc.api import Model, Optimizer
from thinc.backends import get_array_ops

from ..models.shim import AveragingPyTorchShim

Key = Tuple[Hashable, str]
logger = logging.getLogger("spacy")


class ParamAverages:
    """Per-parameter exponential moving averages, updated as thinc's optimizer updates its own
    (``Ops.update_averages``: after the t-th update of a weight, decay min((1 + t) / (10 + t), 0.9999)).

    The component tags (and saves) with :meth:`tagging_model`: a copy of its model holding the averages, made
    once after the last update, so that tagging reads the averages without changing the model that trains
    (several threads may tag at once)."""

    def __init__(self):
        self.values: Dict[Key, object] = {}
        self.counts: Dict[Key, int] = {}
        self._copy: Optional[Model] = None
        self._lock = threading.Lock()

    def __bool__(self) -> bool:
        return bool(self.values)

    def track(self, optimizer) -> "_Averaging":
        """``optimizer``, updating these averages after each weight it updates."""
        return _Averaging(optimizer, self)

    def add(self, key: Key, weights) -> None:
        ops = get_array_ops(weights)
        if key not in self.values:
            self.values[key] = ops.alloc(weights.shape, dtype="float32")
            self.counts[key] = 0
        self.counts[key] += 1
        ops.update_averages(self.values[key], weights, self.counts[key])
        self._copy = None

    def forget_copy(self) -> None:
        """Make :meth:`tagging_model` copy the model again (after a change of its shape: a label added)."""
        self._copy = None

    def tagging_model(self, model: Model) -> Model:
        """``model`` itself while there are no averages; else a copy of it (same layer ids) holding them,
        made at the first call after an update and kept until the next one."""
        if not self.values:
            return model
        with self._lock:
            if self._copy is None:
                self._copy = _with_params(copy.deepcopy(model), self.values)
            return self._copy


def _with_params(model: Model, params: Dict[Key, object]) -> Model:
    """``model`` with the weights of ``params`` (keyed as thinc's optimizer keys them: (model id, name), and
    (shim id, name) for a torch shim's) in place of its own, where it has them."""
    for node in model.walk():
        for name in node.param_names:
            if (node.id, name) in params:
                node.set_param(name, params[(node.id, name)].copy())
        for shim in node.shims:
            if isinstance(shim, AveragingPyTorchShim):  # (thinc's own torch shim never finds its averages)
                shim.load_params(params)
    return model


def listens(model: Model) -> bool:
    """Whether ``model`` reads a shared ``tok2vec`` through a listener (spaCy's ``Tok2VecListener``)."""
    from spacy.pipeline.tok2vec import Tok2VecListener

    return any(isinstance(node, Tok2VecListener) for node in model.walk())


class _Averaging:
    """An optimizer whose updates also feed :class:`ParamAverages` (its other attributes are the optimizer's)."""

    def __init__(self, optimizer, averages: ParamAverages):
        self._optimizer = optimizer
        self._averages = averages

    def __call__(self, key: Key, weights, gradient, **kwargs):
        weights, gradient = self._optimizer(key, weights, gradient, **kwargs)
        self._averages.add(key, weights)
        return weights, gradient

    def __getattr__(self, name: str):
        return getattr(self._optimizer, name)


def average_the_pipeline(optimizer, component: str) -> None:
    """Turn on ``optimizer``'s weight averages (thinc's ``Optimizer.averages``; ``use_averages = true``)
    from its next update on, for every weight it updates: the whole pipeline's. An optimizer that is not
    thinc's is left as it is."""
    if not isinstance(optimizer, Optimizer):
        return
    optimizer.averages = {}
    logger.info("[spacy-nldm] %s: average_params = true and the optimizer keeps no averages, so it now "
                "averages the pipeline's weights (as use_averages = true); set average_params = false "
                "to keep the optimizer as configured", component)
