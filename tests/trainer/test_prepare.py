"""The frozen data side on the real test track: tokenizer, packing, metric."""

import math

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from tests.trainer.reference_packing import pack_rows
from trainer import prepare
from trainer.prepare import BestFitPacker, Tokenizer, evaluate_bpb, iter_documents, make_dataloader, split_files

MIXED_TEXT = (
    "def f(x):\n    return x ** 2  # 12345678 squared\n"
    "Größe, naïve café — Ελληνικά, русский текст, 日本語のテキスト, 한국어 🙂🚀\n"
    "\t tabs\r\nand <|bos|> written as plain text, 3.14159 and 2026-12-02"
)


def split_doc_batches(tokenizer, split, limit=None):
    """The split's documents tokenized with BOS, in the batches the file reader yields them."""
    batches = []
    for texts, epoch in iter_documents(split_files(split)):
        if epoch > 1 or (limit and sum(map(len, batches)) >= limit):
            break
        batches.append(tokenizer.encode(texts, prepend=tokenizer.bos_token_id))
    return batches


def test_track_constants_are_the_test_track(test_track):
    assert (prepare.TRACK, prepare.MAX_SEQ_LEN, prepare.VOCAB_SIZE) == ("test", 128, 1024)
    assert test_track.spec["constants"]["max_seq_len"] == prepare.MAX_SEQ_LEN


def test_tokenizer_round_trip_and_token_bytes(test_track):
    tok = Tokenizer.from_directory()
    assert tok.vocab_size == prepare.VOCAB_SIZE
    ids = tok.encode(MIXED_TEXT)
    assert tok.decode(ids) == MIXED_TEXT
    assert tok.bos_token_id not in ids, "special tokens in text must be encoded as plain text"
    specials = [tok.encoding.encode_single_token(name) for name in prepare.SPECIAL_TOKENS]
    for i in set(range(tok.vocab_size)) - set(specials):
        assert tok.token_bytes[i] == len(tok.encoding.decode_single_token_bytes(i)), i
    assert tok.bos_token_id == specials[0]
    assert all(tok.token_bytes[s] == 0 for s in specials)
    assert (tok.token_bytes[: tok.vocab_size - len(specials)] > 0).all()
    digit_tokens = [tok.decode([i]) for i in tok.encode("1234567890")]
    assert all(len(t) <= 2 for t in digit_tokens), digit_tokens
    batch = tok.encode(["abc", MIXED_TEXT], prepend=tok.bos_token_id)
    assert batch[1] == [tok.bos_token_id, *ids]


def test_packing_matches_the_best_fit_rule(test_track):
    tok = Tokenizer.from_directory()
    row_len = prepare.MAX_SEQ_LEN + 1
    expected = pack_rows(split_doc_batches(tok, "val"), row_len, 200)
    packer = BestFitPacker(tok, iter_documents(split_files("val")), row_len)
    rows = packer.rows(200)
    assert rows.tolist() == expected
    assert packer.epoch == 1


def test_dataloader_rows_start_with_bos_no_padding_and_deterministic(test_track):
    tok = Tokenizer.from_directory()
    batch, seq = 8, prepare.MAX_SEQ_LEN
    first = make_dataloader(tok, batch, seq, "train")
    second = make_dataloader(tok, batch, seq, "train")
    specials = {tok.encoding.encode_single_token(n) for n in prepare.SPECIAL_TOKENS} - {tok.bos_token_id}
    for _ in range(20):
        x1, y1, epoch = next(first)
        x2, y2, _ = next(second)
        assert x1.shape == y1.shape == (batch, seq) and x1.dtype == torch.long
        assert torch.equal(x1, x2) and torch.equal(y1, y2)
        assert (x1[:, 0] == tok.bos_token_id).all()
        assert torch.equal(x1[:, 1:], y1[:, :-1])
        assert not any(int(t) in specials for t in torch.unique(torch.cat([x1, y1])))
        assert epoch == 1


class UniformModel(torch.nn.Module):
    """Predicts every token with equal probability, through the real cross-entropy."""

    def __init__(self, vocab):
        super().__init__()
        self.vocab = vocab
        self.anchor = torch.nn.Parameter(torch.zeros(()))

    def forward(self, inputs, targets, reduction="mean"):
        logits = torch.zeros(*inputs.shape, self.vocab) + self.anchor
        return F.cross_entropy(logits.view(-1, self.vocab), targets.reshape(-1), reduction=reduction)


@pytest.mark.parametrize("batch_size", [64, 7])
def test_evaluate_bpb_of_uniform_model(test_track, batch_size):
    tok = Tokenizer.from_directory()
    rows = prepare.EVAL_TOKENS // prepare.MAX_SEQ_LEN
    packed = np.array(pack_rows(split_doc_batches(tok, "val"), prepare.MAX_SEQ_LEN + 1, rows))
    target_bytes = tok.token_bytes[packed[:, 1:]]
    counted_tokens = int((target_bytes > 0).sum())
    expected = math.log2(tok.vocab_size) * counted_tokens / int(target_bytes.sum())
    bpb = evaluate_bpb(UniformModel(tok.vocab_size), tok, batch_size)
    assert bpb == pytest.approx(expected, rel=1e-7)  # the loss is computed in fp32


def test_evaluate_bpb_scores_a_better_model_lower(test_track):
    """A unigram model fitted on train text beats uniform on val: the metric sees predictions."""
    tok = Tokenizer.from_directory()
    train_docs = [doc for batch in split_doc_batches(tok, "train", 40) for doc in batch]
    counts = np.bincount(np.concatenate([np.asarray(d) for d in train_docs]),
                         minlength=tok.vocab_size) + 1.0
    log_probs = torch.log(torch.tensor(counts / counts.sum(), dtype=torch.float32))

    class Unigram(UniformModel):
        def forward(self, inputs, targets, reduction="mean"):
            logits = log_probs.expand(*inputs.shape, -1) + self.anchor
            return F.cross_entropy(logits.reshape(-1, self.vocab), targets.reshape(-1), reduction=reduction)

    uniform = evaluate_bpb(UniformModel(tok.vocab_size), tok, 32)
    unigram = evaluate_bpb(Unigram(tok.vocab_size), tok, 32)
    assert unigram < uniform - 0.25


class Rows(int):
    """A row count that multiplies to nothing: what a run could hand make_dataloader to hide its draws."""
    def __mul__(self, other):
        return 0

    __rmul__ = __mul__


def test_the_training_tokens_reported_are_those_made_whatever_the_arguments_are(test_track, monkeypatch):
    monkeypatch.setitem(prepare._consumed, "train_tokens", 0)
    loader = make_dataloader(Tokenizer.from_directory(), Rows(8), prepare.MAX_SEQ_LEN, "train")
    for _ in range(3):
        x, _, _ = next(loader)
    assert x.shape == (8, prepare.MAX_SEQ_LEN)
    assert prepare._consumed["train_tokens"] == 3 * 8 * prepare.MAX_SEQ_LEN


def test_budget_steps_leave_room_for_the_micro_batch_drawn_ahead(monkeypatch):
    per_token = prepare.training_flops_per_token(294_980, 2, 64, 128)
    monkeypatch.setattr(prepare, "FLOPS_BUDGET", 1.2e11)
    steps = prepare.budget_steps(294_980, 2, 64, 2048, 2048)
    assert (steps * 2048 + 2048) * per_token <= 1.2e11 < ((steps + 1) * 2048 + 2048) * per_token
    assert prepare.budget_steps(294_980, 2, 64, 8192, 8192) == int((1.2e11 // per_token - 8192) // 8192)
    monkeypatch.setattr(prepare, "FLOPS_BUDGET", None)
    assert prepare.budget_steps(294_980, 2, 64, 2048, 2048) == prepare.STEP_BUDGET
