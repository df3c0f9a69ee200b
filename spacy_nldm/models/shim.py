"""The PyTorch edge scorer as a Thinc layer, with the optimizer's weight averages honoured.

thinc 8.3's ``PyTorchShim`` stores a parameter's running average under the key ``(shim.id,
name)`` (``finish_update``) but ``use_params`` looks for string keys ``"pytorch_<id>_<name>"``, so
``nlp.use_params(optimizer.averages)`` (what ``spacy train`` evaluates and saves with
``use_averages = true``) swaps in the averaged tok2vec and leaves the torch head at its last
weights. :class:`AveragingPyTorchShim` reads the keys ``finish_update`` writes, and its predictions change
no state of the module (threads may predict at once).
"""
import contextlib

import torch
from thinc.api import ArgsKwargs, PyTorchWrapper_v2, torch2xp, xp2torch
from thinc.shims import PyTorchShim
from torch import nn


class AveragingPyTorchShim(PyTorchShim):
    """Also keeps its optimizer keys apart from thinc's: ``finish_update`` keys a torch parameter as
    ``(shim.id, name)`` and thinc keys a Model's as ``(model.id, name)``, with ids from two separate
    counters, so a torch parameter named like a thinc one ("W", "b") could share the Adam state of a
    thinc layer whose id happens to equal the shim's (a shape error, or silently mixed moments). The
    shim's id is therefore a tuple, which no thinc Model id equals."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.id = ("pytorch", self.id)

    def predict(self, inputs: ArgsKwargs):
        """As thinc's, but the module stays in eval mode after it (``begin_update`` sets training mode again):
        thinc's sets training mode on the way out, which a prediction running at the same time in another
        thread would then run in (with its dropout)."""
        self._model.eval()
        with torch.no_grad(), torch.autocast("cuda", enabled=self._mixed_precision):
            return self._model(*inputs.args, **inputs.kwargs)

    def load_params(self, params) -> bool:
        """Load the weights of ``params`` keyed ``(self.id, name)`` into the module; whether there were any."""
        state = {
            key[1]: xp2torch(value, device=self.device)
            for key, value in params.items()
            if isinstance(key, tuple) and len(key) == 2 and key[0] == self.id
        }
        if state:
            self._model.load_state_dict({**self._model.state_dict(), **state})
        return bool(state)

    @contextlib.contextmanager
    def use_params(self, params):
        backup = {k: v.clone() for k, v in self._model.state_dict().items()}
        if not self.load_params(params):
            yield
            return
        try:
            yield
        finally:
            self._model.load_state_dict(backup)


def torch_layer(module: nn.Module, convert_inputs=None, convert_outputs=None):
    """``PyTorchWrapper_v2(module, convert_inputs, convert_outputs)`` whose shim applies averaged parameters
    in ``use_params`` (the edge scorer, the packed BiLSTM)."""
    model = PyTorchWrapper_v2(module, convert_inputs=convert_inputs, convert_outputs=convert_outputs)
    model.shims[0] = AveragingPyTorchShim(module)
    return model


def torch_output_to_array(model, inputs_outputs, is_train: bool):
    """``convert_outputs`` for a module with one output tensor: an array, and its gradient passed back to torch."""
    _, Y_torch = inputs_outputs

    def backprop(dY):
        return ArgsKwargs(args=(Y_torch,), kwargs={"grad_tensors": xp2torch(dY, device=model.shims[0].device)})

    return torch2xp(Y_torch), backprop
