"""The torch.compile backend `hidet_rs` (python/hidet_rs/dynamo.py), against eager PyTorch.

Needs torch, torchvision and transformers, which CI's .venv does not have (too slow to
install): run with ./scripts/test_torch_backend.sh.
"""

import logging

import pytest
import torch

import hidet_rs
import hidet_rs.dynamo

# The largest difference accepted, relative to the largest magnitude of eager's output.
RTOL = 1e-4


def rel_err(got: torch.Tensor, want: torch.Tensor) -> float:
    assert got.shape == want.shape and got.dtype == want.dtype
    return float((got - want).abs().max() / want.abs().max().clamp_min(1e-30))


@pytest.fixture(autouse=True)
def fresh_dynamo():
    torch._dynamo.reset()
    yield
    torch._dynamo.reset()


@pytest.fixture
def compile_calls(monkeypatch):
    """Counts the models hidet compiles (one per graph and set of input shapes)."""
    calls = []
    real = hidet_rs.compile

    def counting(*args, **kwargs):
        calls.append(1)
        return real(*args, **kwargs)

    monkeypatch.setattr(hidet_rs, "compile", counting)
    return calls


def test_backend_is_registered_by_entry_point():
    assert "hidet_rs" in torch._dynamo.list_backends()


def test_resnet18_matches_eager_with_two_batch_sizes(compile_calls, caplog):
    import torchvision

    torch.manual_seed(0)
    model = torchvision.models.resnet18().eval()
    compiled = torch.compile(model, backend="hidet_rs")
    with torch.no_grad(), caplog.at_level(logging.WARNING, logger="hidet_rs"):
        for batch in (1, 3):
            x = torch.randn(batch, 3, 224, 224)
            got, want = compiled(x), model(x)
            print(f"resnet18 batch {batch}: relative error {rel_err(got, want):.2e}")
            assert rel_err(got, want) <= RTOL, batch
    assert not [r for r in caplog.records if r.name == "hidet_rs"]  # nothing ran eagerly
    assert len(compile_calls) == 2  # one compile per batch size


def test_bert_encoder_matches_eager_with_two_batch_sizes(compile_calls, caplog):
    from transformers import BertConfig, BertModel

    torch.manual_seed(0)
    config = BertConfig(
        vocab_size=1000,
        hidden_size=128,
        num_hidden_layers=2,
        num_attention_heads=4,
        intermediate_size=512,
        max_position_embeddings=64,
    )
    model = BertModel(config).eval()
    compiled = torch.compile(model, backend="hidet_rs")
    with torch.no_grad(), caplog.at_level(logging.WARNING, logger="hidet_rs"):
        for batch in (2, 5):
            ids = torch.randint(0, config.vocab_size, (batch, 16))
            mask = torch.ones(batch, 16, dtype=torch.int64)
            mask[0, 12:] = 0  # one padded sequence
            got = compiled(input_ids=ids, attention_mask=mask)
            want = model(input_ids=ids, attention_mask=mask)
            print(
                f"bert batch {batch}: relative error last_hidden_state "
                f"{rel_err(got.last_hidden_state, want.last_hidden_state):.2e}, pooler_output "
                f"{rel_err(got.pooler_output, want.pooler_output):.2e}"
            )
            assert rel_err(got.last_hidden_state, want.last_hidden_state) <= RTOL, batch
            assert rel_err(got.pooler_output, want.pooler_output) <= RTOL, batch
    assert not [r for r in caplog.records if r.name == "hidet_rs"]
    assert len(compile_calls) >= 2


def test_same_shape_reuses_the_compiled_model(compile_calls):
    model = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.GELU(), torch.nn.Linear(16, 4))
    compiled = torch.compile(model, backend=hidet_rs.dynamo.backend(threads=1))
    with torch.no_grad():
        x = torch.randn(3, 8)
        for _ in range(3):
            assert rel_err(compiled(x), model(x)) <= RTOL
    assert len(compile_calls) == 1


def test_graph_break_compiles_both_pieces(compile_calls):
    class Broken(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.a = torch.nn.Linear(6, 6)
            self.b = torch.nn.Linear(6, 3)

        def forward(self, x):
            y = torch.relu(self.a(x))
            torch._dynamo.graph_break()
            return torch.softmax(self.b(y), dim=-1)

    model = Broken().eval()
    compiled = torch.compile(model, backend="hidet_rs")
    with torch.no_grad():
        x = torch.randn(4, 6)
        assert rel_err(compiled(x), model(x)) <= RTOL
    assert len(compile_calls) == 2


def test_unsupported_operator_falls_back_to_eager_with_one_log_line(caplog):
    class Spectrum(torch.nn.Module):
        def forward(self, x):
            return torch.fft.rfft(x).abs() + 1

    model = Spectrum()
    compiled = torch.compile(model, backend="hidet_rs")
    with torch.no_grad(), caplog.at_level(logging.WARNING, logger="hidet_rs"):
        x = torch.randn(2, 16)
        for _ in range(3):
            assert rel_err(compiled(x), model(x)) == 0.0
    lines = [r.getMessage() for r in caplog.records if r.name == "hidet_rs"]
    assert len(lines) == 1, lines
    assert "eagerly" in lines[0] and "fft" in lines[0].lower()


def test_autograd_falls_back_to_eager_and_keeps_gradients(caplog):
    model = torch.nn.Linear(5, 2)
    compiled = torch.compile(model, backend="hidet_rs")
    x = torch.randn(3, 5)
    with caplog.at_level(logging.WARNING, logger="hidet_rs"):
        compiled(x).sum().backward()
    assert model.weight.grad is not None
    assert any("autograd" in r.getMessage() for r in caplog.records if r.name == "hidet_rs")
