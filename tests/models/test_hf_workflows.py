"""Issue 24's workflows on tiny Hugging Face models with real tokenizer files.

Tokens come from the tokenizer's own call; a model changed by normlab saves, with its own
``save_pretrained``, a folder that the original class refuses and the Auto classes and
``normlab.load`` reload exactly; ``load_model`` refuses weights that do not fit; probes
accept normlab's model types; fold keeps tied embeddings tied when it can.
"""

from __future__ import annotations

import json

import pytest
import torch

import normlab
from normlab.models.checkpoint import builtin_batch, load_model, special_tokens
from normlab.probes import adapt
from normlab.probes.report import probe_model
from normlab.surgery import fold_layernorms, fold_rms_gains, replace_norms
from tests._tiny_hf import build, llama_tokenizer, save_with_tokenizer, tokens

transformers = pytest.importorskip("transformers")


@torch.no_grad()
def _out(model, x):
    out = model(input_ids=x)
    return out.logits


def _eager(model):
    model.set_attn_implementation("eager")
    return model


@pytest.mark.parametrize(
    ("family", "first", "last"), [("bert", "[CLS]", "[SEP]"), ("llama", "<s>", None)]
)
def test_tokens_come_from_the_tokenizer_call(family, first, last, tmp_path):
    save_with_tokenizer(family, tmp_path)
    model, _ = load_model(tmp_path)
    batch = builtin_batch(model, tmp_path, batch=3, tokens=20)
    assert batch.source == "tokenizer" and batch.ids.shape == (3, 20)
    specials = special_tokens(tmp_path)
    assert (batch.ids[:, 0] == specials[first]).all()
    if last is not None:  # truncation keeps the closing [SEP] inside max_length
        assert (batch.ids[:, -1] == specials[last]).all()
    again = builtin_batch(model, tmp_path, batch=3, tokens=20)
    assert torch.equal(again.ids, batch.ids)  # deterministic windows


def test_gpt2_byte_level_tokens_decode_to_the_text(tmp_path):
    save_with_tokenizer("gpt2", tmp_path)
    model, _ = load_model(tmp_path)
    batch = builtin_batch(model, tmp_path, batch=2, tokens=24)
    tokenizer = transformers.AutoTokenizer.from_pretrained(tmp_path)
    assert batch.source == "tokenizer" and int(batch.ids.max()) < model.config.vocab_size
    text = tokenizer.decode(batch.ids[0])
    assert len(text) == 24  # one byte-level token per byte of ASCII source text


def test_a_tokenizer_without_pad_token_pads_with_eos_on_the_right():
    from normlab.models.checkpoint import _pad_token

    tokenizer = llama_tokenizer()
    assert tokenizer.pad_token is None
    _pad_token(tokenizer)
    enc = tokenizer(["ab", "abcdef"], padding=True, return_tensors="pt")
    assert tokenizer.pad_token == "</s>"
    assert enc["attention_mask"].tolist()[0] == [1, 1, 1, 0, 0, 0, 0]  # <s> a b, then pad
    assert enc["input_ids"][0, -1] == tokenizer.eos_token_id


def test_positions_above_the_model_are_refused(tmp_path):
    model = build("gpt2")  # 64 positions
    with pytest.raises(ValueError, match="at most 64"):
        builtin_batch(model, None, tokens=65)
    assert builtin_batch(model, None, tokens=65, positions=64).ids.shape[1] == 65


@pytest.mark.parametrize("family", ["gpt2", "llama", "bert"])
def test_replaced_model_saves_normlab_format_and_reloads_exactly(family, tmp_path):
    model = _eager(build(family))
    x = tokens()
    replace_norms(model, "dyt")
    model.save_pretrained(tmp_path / "a")
    files = sorted(p.name for p in (tmp_path / "a").iterdir())
    assert "normlab.safetensors" in files and "model.safetensors" not in files
    config = json.loads((tmp_path / "a" / "config.json").read_text())
    assert config["model_type"] == f"normlab_{family}" and "auto_map" in config
    with pytest.raises(OSError, match=r"model\.safetensors"):
        getattr(transformers, type(model).__name__).from_pretrained(tmp_path / "a")
    loaded = normlab.load(tmp_path / "a")
    assert loaded.normlab_kind == "hf"
    assert torch.equal(_out(loaded, x), _out(model, x))
    from normlab.models.hf_auto import register_auto_classes

    register_auto_classes()
    auto_cls = (
        transformers.AutoModelForMaskedLM
        if family == "bert"
        else (transformers.AutoModelForCausalLM)
    )
    auto = auto_cls.from_pretrained(tmp_path / "a", attn_implementation="eager")
    assert torch.equal(_out(auto, x), _out(model, x))
    loaded.save_pretrained(tmp_path / "b")  # a reloaded model saves normlab's format again
    assert not (tmp_path / "b" / "model.safetensors").exists()
    assert torch.equal(_out(normlab.load(tmp_path / "b"), x), _out(model, x))


def test_load_model_refuses_weights_that_do_not_fit_naming_the_keys(tmp_path):
    model = build("gpt2")
    replace_norms(model, "dyt")
    type(model).save_pretrained(model, tmp_path)  # transformers' own writer, bypassing normlab
    with pytest.raises(ValueError, match=r"unexpected \(transformer\.h\.0\.ln_1\.alpha"):
        load_model(tmp_path)


def test_folded_model_save_pretrained_refuses_plain_class_and_reloads(tmp_path):
    model = _eager(build("gpt2"))
    x = tokens()
    result = fold_layernorms(model, {"input_ids": x})
    assert result.folded and result.untied == (("transformer.wte", "lm_head"),)
    model.save_pretrained(tmp_path)
    with pytest.raises(OSError, match=r"model\.safetensors"):
        transformers.GPT2LMHeadModel.from_pretrained(tmp_path)
    loaded = normlab.load(tmp_path)
    assert torch.equal(_out(loaded, x), _out(model, x))
    assert adapt(loaded).family == "gpt2"  # a normlab_gpt2 model is probed as GPT-2
    record = probe_model(loaded, torch.cat([x, x[:, :1]], 1), swap=False)
    assert {"outliers", "sinks", "depth", "rank"} <= set(record["probes"])
    assert record["nonfinite"] == {}
    (tmp_path / "normlab.safetensors").rename(tmp_path / "model.safetensors")
    with pytest.raises(FileNotFoundError, match=r"weights are normlab\.safetensors"):
        load_model(tmp_path)  # renamed weights are refused, not loaded into a plain GPT-2


def test_probes_accept_a_reloaded_bert_with_dyt(tmp_path):
    model = _eager(build("bert"))
    replace_norms(model, "dyt")
    normlab.save(model, tmp_path)
    loaded = normlab.load(tmp_path)
    assert loaded.config.model_type == "normlab_bert" and adapt(loaded).family == "bert"
    assert not adapt(loaded).causal
    record = probe_model(loaded, tokens(), swap=False)
    assert "outliers" in record["probes"] and "sinks" in record["probes"]


def test_gain_fold_is_marked_and_saves_plain_files_that_reload_exactly(tmp_path):
    model = _eager(build("llama"))
    x = tokens()
    assert fold_rms_gains(model, {"input_ids": x}).folded
    assert "fold_rms_gains" in model._normlab_changes
    model.save_pretrained(tmp_path)  # only weights changed: plain Hugging Face files
    assert (tmp_path / "model.safetensors").exists()
    plain = transformers.LlamaForCausalLM.from_pretrained(tmp_path, attn_implementation="eager")
    assert torch.equal(_out(plain, x), _out(model, x))


def test_quantized_model_save_pretrained_refuses_until_dequantized(tmp_path):
    from normlab.quant import dequantize_model, quantize_model

    model = build("gpt2")
    quantize_model(model, "w8a8")
    with pytest.raises(ValueError, match="dequantize_model"):
        model.save_pretrained(tmp_path)
    assert not (tmp_path / "model.safetensors").exists()
    dequantize_model(model)
    model.save_pretrained(tmp_path)
    assert (tmp_path / "model.safetensors").exists()


def test_save_pretrained_of_a_changed_model_refuses_unsupported_arguments(tmp_path):
    model = build("gpt2")
    replace_norms(model, "rmsnorm")
    with pytest.raises(TypeError, match="max_shard_size"):
        model.save_pretrained(tmp_path, max_shard_size="1MB")
    model.save_pretrained(tmp_path, is_main_process=False)
    assert not tmp_path.joinpath("config.json").exists()


def test_fold_keeps_tied_embeddings_tied_when_both_copies_stay_equal():
    model = build("gpt2")
    x = tokens()
    with torch.no_grad():  # zero-mean rows: centring the embedding changes nothing
        wte = model.transformer.wte.weight
        wte.sub_(wte.mean(-1, keepdim=True))
    blocks = [f"transformer.h.{i}.ln_{j}" for i in range(2) for j in (1, 2)]
    result = fold_layernorms(model, {"input_ids": x}, only=blocks)  # ln_f (the head) stays
    assert set(result.folded) == set(blocks) and result.untied == () and result.check.passed
    assert model.lm_head.weight is model.transformer.wte.weight


def test_save_and_load_at_the_top_level_for_tinygpt(tmp_path):
    from normlab.models.gpt import GPTConfig, TinyGPT

    model = TinyGPT(GPTConfig(d_model=16, n_layers=1, n_heads=2, context=8)).eval()
    replace_norms(model, "dyt")
    assert normlab.save(model, tmp_path) == tmp_path
    loaded = normlab.load(tmp_path)
    x = torch.randint(0, 256, (2, 8))
    assert loaded.normlab_kind == "normlab"
    with torch.no_grad():
        assert torch.equal(loaded(x), model(x))


# --- issue 38: trained tokenizers beside four families; issue 36 item 17: plain round trip ---

TRAINED = [("gpt2", "bpe"), ("bert", "wordpiece"), ("t5", "unigram"), ("qwen2", "bpe")]


@pytest.mark.slow
@pytest.mark.parametrize(("family", "kind"), TRAINED)
def test_trained_tokenizer_folders_probe_fold_and_probe_again(family, kind, tmp_path, capsys):
    from normlab.cli import main
    from tests._tiny_hf import trained_tokenizer

    tokenizer = trained_tokenizer(kind)
    src, folded = tmp_path / "src", tmp_path / "folded"
    model = build(family, vocab_size=max(61, len(tokenizer)))
    model.save_pretrained(src)
    tokenizer.save_pretrained(src)
    assert (src / "tokenizer.json").is_file()
    code = main(["probe", str(src), "--out", str(tmp_path / "p1"), "--no-progress"])
    assert code == 0, capsys.readouterr()
    code = main(["fold", str(src), str(folded)])
    text = capsys.readouterr().out
    if family == "bert":  # post-LN: nothing foldable, refused with the reasons
        assert code == 2 and "post-LN" in text
        return
    assert code == 0 and "norm gain(s)" in text, text
    assert (folded / "tokenizer.json").is_file()
    loaded, _ = load_model(folded)
    batch = builtin_batch(loaded, folded, batch=2, tokens=16)
    assert batch.source == "tokenizer"
    code = main(["probe", str(folded), "--out", str(tmp_path / "p2"), "--no-progress"])
    assert code == 0
    assert main(["fold", str(folded), str(tmp_path / "again")]) == 2
    assert "already folded" in capsys.readouterr().err


@pytest.mark.parametrize("family", ["llama", "mistral", "qwen2"])
def test_gain_folded_llama_style_model_is_plain_and_marked(family, tmp_path):
    model = build(family)
    x = tokens()
    expected = fold_rms_gains(model, {"input_ids": x})
    assert expected.folded
    model.save_pretrained(tmp_path)
    assert (tmp_path / "model.safetensors").is_file()
    assert (tmp_path / "generation_config.json").is_file()
    cls = getattr(transformers, type(model).__name__)
    plain = cls.from_pretrained(tmp_path).eval()  # no custom code, no trust_remote_code
    assert torch.equal(_out(plain, x), _out(model, x))
    assert plain.config.normlab_folded == ["fold_rms_gains"]
    with pytest.raises(ValueError, match="already folded"):
        fold_rms_gains(plain, {"input_ids": x})


@pytest.mark.parametrize("family", ["llama", "gemma", "qwen3"])
def test_export_plain_puts_the_family_norm_back(family, tmp_path):
    from normlab.surgery.hf_plain import export_plain

    model = build(family)
    x = tokens()
    replace_norms(model, "rmsnorm", copy_affine=family != "gemma")
    export_plain(model, tmp_path)
    assert (tmp_path / "model.safetensors").is_file()
    assert not (tmp_path / "normlab.safetensors").exists()
    config = json.loads((tmp_path / "config.json").read_text())
    assert "auto_map" not in config and config["model_type"] == family
    plain = transformers.AutoModelForCausalLM.from_pretrained(tmp_path).eval()
    want, got = _out(model, x), _out(plain, x)
    assert float((got - want).abs().max()) <= 1e-5 * float(want.abs().max())


def test_export_plain_refuses_a_model_without_a_plain_equivalent(tmp_path):
    from normlab.surgery.hf_plain import export_plain

    model = build("gpt2")
    fold_layernorms(model, {"input_ids": tokens()})
    with pytest.raises(ValueError, match="Cannot export GPT2LMHeadModel as plain files"):
        export_plain(model, tmp_path)
