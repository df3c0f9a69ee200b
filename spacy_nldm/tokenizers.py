"""Tweet tokenizers that cut raw text the way the training corpora were cut.

``@tokenizers = "spacy-nldm.TweetTokenizer.v1"`` with ``conventions``:

* ``"ark"``: the ARK Twitter POS data (Gimpel et al. 2011, Owoputi et al. 2013): URLs, e-mail addresses,
  @-mentions, hashtags, emoticons, emoji runs and HTML entities are single tokens; contractions stay whole
  (``I'm``, ``don't``); hyphens, slashes, ``&``, ``$``, ``*``, ``…`` and symbols stay inside words
  (``T-Mobile``, ``w/``, ``$200``, ``sh*t``, ``sp…``, ``out♥``); a run of punctuation is one token (``...``,
  ``!!!``, ``?!``, ``..."``); other punctuation (``.,!?;:"'()[]{}<>``) is split off, except a closing
  bracket before a period (``Toronto).`` -> ``Toronto)`` ``.``), as the ARK annotators left it.
* ``"ud"``: Tweebank v2 (Liu et al. 2018, UD English tweets): the same units, with UD's word splits on top:
  clitics (``I'm`` -> ``I 'm``, ``don't`` -> ``do n't``, ``can't`` -> ``ca n't``, ``its`` -> ``it s``,
  ``gonna`` -> ``gon na``, possessive ``'s``), hyphens between words (``Kool-Aid`` -> ``Kool - Aid``, except
  after prefixes such as ``anti-`` or ``pre-``), currency signs, ``%`` and units (``6pm`` -> ``6 pm``), and
  punctuation grouped only when the same mark repeats (``!!!``, ``?!``, ``...``; ``..."`` -> ``... "``).

The rules were written from the gold tokens of the corpora (``python -m projects.paper tokenizer``
measures them); no code from other tokenizers was used. The tokenizer keeps every character: ``doc.text``
equals the input, and whitespace other than one space after a token becomes a whitespace token, as in
spaCy's own tokenizer.
"""
from __future__ import annotations

import re
from pathlib import Path
from typing import Callable, Iterable, Iterator, List, Tuple, Union

import srsly
from spacy.tokens import Doc
from spacy.util import ensure_path, registry
from spacy.vocab import Vocab

CONVENTIONS = ("ark", "ud")

# --- shared units -------------------------------------------------------------------------------------------

# Emoji: pictographs, symbols and dingbats, private-use (old phone emoji), with variation selectors, skin tones,
# keycaps and ZWJ joins; a run of emoji without spaces is one token (both corpora cut them so).
_PICTO = (
    "\U0001F000-\U0001F3FA\U0001F400-\U0001FAFF"  # pictographs, flags (regional indicators), emoticons
    "\u2600-\u27BF"  # miscellaneous symbols and dingbats (hearts, suns, stars, check marks)
    "\u2B00-\u2BFF\u2300-\u23FF\u2190-\u21FF\u25A0-\u25FF\u2900-\u297F"  # arrows, shapes, technical
    "\u3030\u303D\u3297\u3299\u2139\u203C\u2049"
    "\uE000-\uE5FF"  # private use (pre-Unicode phone emoji)
)
_MODIFIER = "\uFE0E\uFE0F\u20E3\U0001F3FB-\U0001F3FF\U000E0020-\U000E007F"
_ONE_EMOJI = rf"(?:[{_PICTO}]|[0-9#*]\uFE0F?\u20E3)[{_MODIFIER}]*"
EMOJI = rf"(?:{_ONE_EMOJI}(?:\u200D{_ONE_EMOJI})*|[\U0001F3FB-\U0001F3FF])+"

URL = (
    r"(?:(?:https?|ftp)://|www\.)[^\s]*[^\s.,!?;:\"'“”‘’)\]}>…*]"
    r"|(?:https?|ftp)://"
    r"|[\w-]+(?:\.[\w-]+)*\.(?i:com|net|org|edu|gov|co|uk|us|ca|me|ly|gl|fm|tv|in|it|be|io|info|biz|de|fr|au|jpg|jpeg|png|gif|flv|mp3|mp4|pdf|html?)"
    r"(?:/[^\s]*[^\s.,!?;:\"'“”‘’)\]}>…*])?(?![\w@])"
)
EMAIL = r"\w[\w+-]*(?:\.[\w+-]+)*@[\w-]+(?:\.[\w-]+)*\.(?:com|net|org|edu|gov|info|[A-Za-z]{2})(?![\w])"
ENTITY = r"&(?:#\d+|#[xX][0-9a-fA-F]+|[A-Za-z]+);"

# Emoticons. Western: eyes, optional nose, a repeated mouth; a letter mouth must not run into a word.
_EYES = r"(?:[:;=]|(?<![\w])[xX8](?=[-']?[DPp()\]\[]))"
_NOSE = r"(?:'-|-'|[-o'^])?"
_MOUTH = r"(?:[)\](\[{}|/\\*@<>$#]+|[DPpOoSsbXL]+(?![\w])|3+(?![\d])|c(?![\w]))"
_WESTERN = rf"{_EYES}{_NOSE}{_MOUTH}"
_REVERSED = (
    r"(?:(?<![\w)\]])[)\]/\\]+|[(\[]+)[-o'^]?[:;=](?![\w/(\[\])])|(?<![\w])[DX][:;=](?![\w])"
)
_EASTERN = (
    r"(?<![\w])(?:[-^oO0>T=+;n<*@][_]+[-^oO0<T=+;n>*@]|[-^oO<>][.][-^oO<>]|\^-?\^|[vV]\.[vV]|;;)(?![\w])"
    r"|¯\\_+\(ツ\)_+/¯|\\m/|\\o/|o/|\\o"
)
_HEART = r"(?:<|&lt;)+/?3+(?![\d])"
# Kaomoji: a face in brackets with at least one non-ASCII mark and no letter or digit of the Latin
# alphabet, optionally with an arm: ("`▽´)-σ, (╯_╰), (^_^).
_KAOMOJI = r"[(（](?=[^\s()（）]*(?:[^\x00-\x7F]|\^))[^\sA-Za-z0-9()（）]{1,12}[)）](?:-?[σゞノ☆])?"
EMOTICON = rf"(?:{_KAOMOJI}|{_WESTERN}|{_REVERSED}|{_EASTERN}|{_HEART})"

# Abbreviations that keep their period.
_ABBREVIATIONS = (
    "mr mrs ms dr st jr sr vs etc inc ltd corp ave blvd mt ft sen rep gov gen sgt capt col prof "
    "feb apr aug sept oct nov dec approx dept misc tel cr feat rs pt ep sec"
).split()
ABBREVIATION = (
    r"(?:[A-Za-z]\.){2,}(?![A-Za-z])|[A-Za-z](?:\.[A-Za-z])+(?![\w.])"
    r"|(?<![\w])(?i:" + "|".join(_ABBREVIATIONS) + r")\.(?![\w.])|(?<![\w.])[A-HJ-Z]\.(?=\s|$)"
)

_APOS = "'’`"
# Combining marks (Python's \w leaves them out): they stay with the letter before them.
COMBINING = (
    "\u0300-\u036F\u0483-\u0489\u0591-\u05BD\u0610-\u061A\u064B-\u065F\u0670\u06D6-\u06DC"
    "\u0900-\u0903\u093A-\u094F\u0951-\u0957\u0962\u0963\u0E31\u0E34-\u0E3A\u0E47-\u0E4E"
    "\u1AB0-\u1AFF\u1DC0-\u1DFF\uFE20-\uFE2F"
)
_ARROW = r"<+-+|-+>+|<+=+|=+>+|-{2,}|<{2,}|>{2,}"
# Whitespace that separates tokens; other Unicode spaces (a no-break space) are tokens of their own, as
# in the ARK data.
WHITESPACE = " \t\n\r\f\v"
SPACE = rf"[^\S{WHITESPACE}]"

# --- the two conventions ------------------------------------------------------------------------------------

# ark: a word runs over everything that is not whitespace, emoji, or one of these marks; inside a word a
# period or a comma joins two digits / letters as in numbers and abbreviations.
_ARK_SPLIT = ".,!?;:\"'()\\[\\]{}<>"
# (pictographs of the supplementary planes split off; older phone emoji in the private-use area, the BMP
# symbols and the odd Unicode spaces stay inside a word, as in "\ue107RT", "out♥", "—\xa0launch")
_ARK_NOT_WORD = rf"{WHITESPACE}{_ARK_SPLIT}\U0001F000-\U0001FAFF"
_ARK_EMOJI = EMOJI.replace("\uE000-\uE5FF", "")
_ARK_WORD = (
    rf"(?:(?!{ENTITY})[^{_ARK_NOT_WORD}]"
    r"|[(\[](?=[^\s\w@#()\[\]\"'])"  # a bracket before a symbol stays with it: "($169", "[/35"
    r"|(?<=\w)['<>](?=\w)|(?<=\d)[.,:](?=\d)|(?<=[A-Za-z])\.(?=[A-Za-z]\b)"
    r"|(?<=\w)[)\]]+(?= ?[.!?])"  # "Toronto)." -> "Toronto)" "."
    r")+"
)
_ARK_PUNCT = (
    rf"(?:(?!{EMOTICON})[.,!?;:\"'()\[\]{{}}<>])+"
)
# A piece made only of symbols (no letter, digit or emoji) is one token: "===}}", '("╯_╰)'.
_ARK_SYMBOLS = rf"(?<![^{WHITESPACE}])(?:_|[^\w{WHITESPACE}\U0001F000-\U0001FAFF\uE000-\uE5FF]){{2,}}(?![^{WHITESPACE}])"
ARK_PATTERN = re.compile(
    "|".join(
        f"(?P<{name}>{pattern})"
        for name, pattern in [
            ("symbols", _ARK_SYMBOLS),
            ("url", URL),
            ("email", EMAIL),
            ("mention", r"[@＠]\w+(?:['’]s\b)?"),
            ("hashtag", r"[#＃]\w+(?:['’]s\b)?"),
            ("emoticon", EMOTICON),
            ("entity", ENTITY),
            ("at_paren", r"\(@(?=\s|$)"),
            ("emoji", _ARK_EMOJI),
            ("abbrev", ABBREVIATION),
            ("arrow", _ARROW),
            ("word", _ARK_WORD),
            ("punct", _ARK_PUNCT),
        ]
    )
)

# ud: words are letters and digits joined by apostrophes, inner periods of abbreviations, digit separators;
# hyphens, clitics and units are split afterwards by _split_ud_word.
_UD_WORD = (
    rf"(?:\w|(?<=\w)[{COMBINING}]|(?<=[A-Za-z])[*$]+(?=[A-Za-z])|(?<=[A-Za-z])&(?=[A-Z]\b)|(?<=\w)['’`](?=\w)|(?<=\w)-(?=\w)"
    r"|(?<=\d)[.:/](?=\d)|(?<=\d),(?=\d{3}(?!\d))|(?<=\d)\+(?=\d))+(?:(?<=in)['’](?![\w]))?"
)
# Words Tweebank v2 keeps whole although they hold a mark that is otherwise split off.
_UD_SPECIAL = r"(?i:w/o|w/|s/o|b/c|ac/dc|p/l|c\+\+|yahoo!)(?![A-Za-z])|(?<![\w])n['’](?![\w])"
# "its" and "ur" are split as "it s" / "u r" where they stand for "it is" / "you are" (judged from the next
# word), and kept whole as the possessives; a capitalised "Its" is taken for "It's".
_UD_VERB_CONTEXT = (
    r"(?:a|an|the|not|no|so|too|just|like|been|being|gon|gonna|going|ok|okay|at|on|in|from|with|him|her|me|"
    r"mine|also|all|always|never|still|only|really|about|over|almost|kinda|literally|actually|time|"
    r"that|this|what|my|your|his|our|their|lit|cray|sad|funny|true|cold|hot|hard|early|late|real|"
    r"crazy|good|bad|great|cool|cute|fine|right|wrong|sure|hilarious|\w+ing)"
)
_UD_YOU_ARE = (
    rf"(?<![\w'])(?:(?:It|IT)(?=[sS](?![\w'’]))|it(?=s\s+{_UD_VERB_CONTEXT}(?![\w'’]))"
    rf"|[uU](?=[rR]\s+{_UD_VERB_CONTEXT}(?![\w'’])))"
)
_UD_CLITIC = r"(?<![\w])['’`](?:[sSdDmM]|re|RE|ve|VE|ll|LL|em|all)(?![\w])"
_UD_PUNCT = (
    r"[.!?…]+|(?P<mark>[,;:\"'“”‘’«»()\[\]{}*~|=+_/\\^<>#&$£€%-])(?P=mark)*"
)

UD_PATTERN = re.compile(
    "|".join(
        f"(?P<{name}>{pattern})"
        for name, pattern in [
            ("space", SPACE),
            ("url", URL),
            ("email", EMAIL),
            ("mention", r"[@＠]\w+"),
            ("hashtag", r"[#＃](?!\d(?!\w))\w+"),
            ("emoticon", EMOTICON),
            ("entity", ENTITY),
            ("emoji", EMOJI),
            ("abbrev", ABBREVIATION),
            ("special", _UD_SPECIAL),
            ("you_are", _UD_YOU_ARE),
            ("clitic", _UD_CLITIC),
            ("number", r"(?<![^\s(\[])[-+]\.?\d+(?:[.,:]\d+)*(?![\w.,:])|(?<![\w.])\.\d+(?![\w.,:])|°[CF](?![\w])"),
            ("word", _UD_WORD),
            ("arrow", _ARROW),
            ("punct", _UD_PUNCT),
        ]
    )
)

# Hyphenated words Tweebank v2 keeps whole: after these prefixes, and words spelt letter by letter.
_UD_HYPHEN_PREFIXES = frozenset("anti pre pro non re un ex semi mis".split())
_UD_UNITS = (
    "am|pm|a|p|k|m|g|kg|km|mm|cm|gb|mb|kb|mins?|hrs?|yrs?|lbs?|oz|ft|pp|w|v|mah|mph|x|c|bd|br"
)
# Contractions written without an apostrophe that Tweebank v2 splits (most often), with the split point.
_UD_NO_APOS = {
    "gonna": 3, "wanna": 3, "gotta": 3, "lemme": 3, "gimme": 3, "cannot": 3, "im": 1, "ive": 1,
    "thats": 4, "theres": 5, "theyre": 4, "dont": 2, "didnt": 3, "doesnt": 4, "isnt": 2,
    "wont": 2, "arent": 3, "werent": 4, "havent": 4, "hasnt": 3, "hadnt": 3, "couldnt": 5,
    "wouldnt": 5, "shouldnt": 6,
}
_UD_CLITIC_SUFFIX = re.compile(r"(?i)^(.+?)(['’`](?:s|d|m+|re|ve|ll|em|all))$")
_UD_NEG = re.compile(r"(?i)^(.+?)(n['’`]t)$")


def _split_ud_word(word: str) -> List[str]:
    """Tweebank v2's splits inside a word token (letters, digits, apostrophes, hyphens)."""
    if "-" in word:
        parts = word.split("-")
        letters = all(len(p) == 1 and p.isalpha() for p in parts)
        digits = all(p.isdigit() for p in parts) and len(parts) >= 3
        prefix = parts[0].lower() in _UD_HYPHEN_PREFIXES or (len(parts[0]) == 1 and parts[0].isalpha())
        if not (letters or digits or prefix or any(p == "" for p in parts)):
            out: List[str] = []
            for i, part in enumerate(parts):
                if i:
                    out.append("-")
                out.extend(_split_ud_word(part))
            return out
        return [word]
    m = re.match(r"^(\d+)([xX])(\d+)$", word)  # 9x12 -> 9 x 12
    if m:
        return list(m.groups())
    m = re.match(rf"^(\d[\d.,:]*)({_UD_UNITS})$", word, flags=re.IGNORECASE)
    if m and m.group(2) != "A":  # "6pm" -> "6 pm", but "109A" (a house number, a class) stays
        return [m.group(1), m.group(2)]
    m = _UD_NEG.match(word)
    if m:
        return [m.group(1), m.group(2)]
    m = _UD_CLITIC_SUFFIX.match(word)
    if m:
        return [m.group(1), m.group(2)]
    if word[-1] in _APOS and word[-2:-1] in ("s", "S"):
        return [word[:-1], word[-1]]
    cut = _UD_NO_APOS.get(word.lower())
    if cut is not None:
        return [word[:cut], word[cut:]]
    return [word]


_WS = re.compile(rf"[{WHITESPACE}]+")


def _pieces(text: str, conventions: str) -> Iterator[str]:
    """Tokens and whitespace runs of ``text``, in order; their concatenation is ``text``.

    The rules are tried at each position in a fixed order (the first that matches wins); a character that
    no rule takes is a token of its own.
    """
    pattern = ARK_PATTERN if conventions == "ark" else UD_PATTERN
    pos = 0
    n = len(text)
    while pos < n:
        m = _WS.match(text, pos) or pattern.match(text, pos)
        if m is None or m.end() == pos:
            yield text[pos]
            pos += 1
            continue
        if conventions == "ud" and m.lastgroup == "word":
            yield from _split_ud_word(m.group())
        else:
            yield m.group()
        pos = m.end()


def tokenize(text: str, conventions: str) -> Tuple[List[str], List[bool]]:
    """Words and spaces (spaCy's convention) for ``text``: ``Doc(vocab, words, spaces).text == text``.

    One space after a token is that token's trailing space; any other whitespace is a token of its own.
    """
    words: List[str] = []
    spaces: List[bool] = []
    for piece in _pieces(text, conventions):
        if piece[0] in WHITESPACE:
            if words and not spaces[-1] and words[-1][0] not in WHITESPACE and piece[0] == " ":
                spaces[-1] = True
                piece = piece[1:]
            if not piece:
                continue
        words.append(piece)
        spaces.append(False)
    return words, spaces


def check_conventions(conventions: str) -> str:
    if conventions not in CONVENTIONS:
        raise ValueError(
            f"unknown tokenizer conventions {conventions!r}: expected one of {', '.join(map(repr, CONVENTIONS))} "
            "('ark': ARK Twitter POS tokens, contractions whole; 'ud': Tweebank v2 / UD tokens, clitics split)"
        )
    return conventions


class TweetTokenizer:
    """A spaCy tokenizer for tweets; ``conventions`` is ``"ark"`` or ``"ud"`` (see the module docstring)."""

    def __init__(self, vocab: Vocab, conventions: str = "ark"):
        self.vocab = vocab
        self.conventions = check_conventions(conventions)

    def __call__(self, text: str) -> Doc:
        words, spaces = tokenize(text, self.conventions)
        return Doc(self.vocab, words=words, spaces=spaces)

    def pipe(self, texts: Iterable[str], batch_size: int = 1000) -> Iterator[Doc]:
        for text in texts:
            yield self(text)

    # serialization: the only setting is the conventions
    def to_bytes(self, *, exclude: Iterable[str] = tuple()) -> bytes:
        return srsly.msgpack_dumps({"conventions": self.conventions})

    def from_bytes(self, data: bytes, *, exclude: Iterable[str] = tuple()) -> "TweetTokenizer":
        self.conventions = check_conventions(srsly.msgpack_loads(data)["conventions"])
        return self

    def to_disk(self, path: Union[str, Path], *, exclude: Iterable[str] = tuple()) -> None:
        path = ensure_path(path)
        path.parent.mkdir(parents=True, exist_ok=True)
        srsly.write_json(path, {"conventions": self.conventions})

    def from_disk(self, path: Union[str, Path], *, exclude: Iterable[str] = tuple()) -> "TweetTokenizer":
        self.conventions = check_conventions(srsly.read_json(ensure_path(path))["conventions"])
        return self


@registry.tokenizers("spacy-nldm.TweetTokenizer.v1")
def create_tweet_tokenizer(conventions: str = "ark") -> Callable[["Language"], TweetTokenizer]:  # noqa: F821
    """``[nlp.tokenizer] @tokenizers = "spacy-nldm.TweetTokenizer.v1"``, ``conventions = "ark"`` or ``"ud"``."""
    check_conventions(conventions)

    def make_tokenizer(nlp) -> TweetTokenizer:
        return TweetTokenizer(nlp.vocab, conventions)

    return make_tokenizer
