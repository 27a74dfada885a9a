"""The recorder's public extension point (`attnlab.tracing.extras`): an extra statistic sees the same tensors at the
same moments on the whole-pattern path (toy) and the chunked path (real models), and its result comes back."""

import pytest
import torch

from attnlab.tracing import TraceRecorder
from attnlab.tracing.extras import BatchShape, ExtraStatistic
from tests.numerics import assert_close
from tests.real.rounding import U64


class Columns(ExtraStatistic):
    """Per sequence, Σ_j A[l,h,j,i] -> [N,L,H,T], the residual's max |x| per stream -> [N,R], and the call log."""

    def __init__(self) -> None:
        self.cols, self.peaks, self.log, self.shapes = [], [], [], []

    def begin_batch(self, shape: BatchShape) -> None:
        self.shapes.append(shape)
        self.log.append("begin")
        self.col = torch.zeros(shape.batch, shape.layers, shape.heads, shape.seq_len, dtype=torch.float64)
        self.peak = torch.zeros(shape.batch, shape.streams, dtype=torch.float64)

    def attention_rows(self, layer: int, q0: int, rows: torch.Tensor) -> None:
        assert rows.dtype == torch.float32
        self.col[:, layer, :, : rows.shape[-1]] += rows.double().sum(2)

    def residual(self, index: int, hidden: torch.Tensor) -> None:
        self.peak[:, index] = hidden.abs().amax(dim=(1, 2)).double()

    def end_batch(self) -> None:
        self.log.append("end")
        self.cols.append(self.col)
        self.peaks.append(self.peak)

    def result(self):
        return torch.cat(self.cols).numpy(), torch.cat(self.peaks).numpy()


def _patterns(B, L, H, T):
    S = torch.randn(B, L, H, T, T)
    mask = torch.tril(torch.ones(T, T, dtype=torch.bool))
    return S.masked_fill(~mask, float("-inf")).softmax(-1)


@pytest.mark.numerics
def test_an_extra_statistic_sees_both_paths_alike():
    torch.manual_seed(0)
    L, H, T, B, d = 2, 3, 9, 2, 4
    batches = [(_patterns(B, L, H, T), torch.randn(B, L + 1, T, d)) for _ in range(2)]
    results = []
    for chunked in (False, True):
        extra = Columns()
        rec = TraceRecorder(L, H, T, extras={"columns": extra})
        for A, x in batches:
            rec.begin_batch(None, batch_size=B)
            for layer in range(L):
                if chunked:  # query chunks over their visible keys, as the HF adapter sends them
                    for q0 in range(0, T, 4):
                        q1 = min(T, q0 + 4)
                        rec.attention_rows(layer, q0, A[:, layer, :, q0:q1, :q1])
                else:
                    rec.attention(layer, A[:, layer])
            for r in range(L + 1):
                rec.residual(r, x[:, r])
        rec.result()
        results.append(rec.extra_results()["columns"])
        assert extra.log == ["begin", "end", "begin", "end"]  # result() and extra_results() flush once
        assert extra.shapes[0] == BatchShape(batch=B, layers=L, heads=H, seq_len=T, streams=L + 1)
    A = torch.cat([a for a, _ in batches]).double()
    x = torch.cat([h for _, h in batches])
    for cols, peaks in results:
        # The same float32 weights summed over T = 9 queries in float64, in two groupings: within 2·T·2^-53·Σ A
        # (Σ A <= T), against atol 1e-6 before.
        assert_close(cols, A.sum(3), atol=2 * T * T * U64, label="extra columns", kind="bound")  # [N,L,H,T]
        assert_close(peaks, x.abs().amax(dim=(2, 3)), atol=0, label="extra peaks", kind="bound")  # a maximum: exact


def test_a_recorder_without_extras_hands_back_nothing():
    rec = TraceRecorder(1, 1, 3)
    rec.begin_batch(None, batch_size=1)
    rec.attention(0, _patterns(1, 1, 1, 3)[:, 0])
    assert rec.extra_results() == {}
    assert rec.n_seq == 1 and rec.result().sink_score_per_sample.shape == (1, 1, 1)
