"""A corpus subset (``benchmarks/models``): models no one here wrote import, compile and match
ONNX Runtime, at the test suite's input sizes."""

import sys
from pathlib import Path

import pytest

pytest.importorskip("torch")
pytest.importorskip("torchvision")
pytest.importorskip("onnxruntime")
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks" / "models"))

import corpus
import numpy as np
import torch
import zoo


@pytest.mark.parametrize(
    "name",
    [
        pytest.param("lstm_classifier", marks=pytest.mark.slow),
        "bilstm_classifier",
        "gru_classifier",
        "two_tower",
        "erf_encoder",
        "squeezenet1_1",
    ],
)  # lstm_classifier (8 s): bilstm_classifier's LSTM one way (make test-slow)
def test_corpus_model_imports_compiles_and_matches_onnx_runtime(name, tmp_path):
    row = corpus.check(name, tmp_path, rounds=0, small=True)
    assert row["stage"] == "time", row
    assert row["rel_err"] <= corpus.TOLERANCE


def _row_of(module: torch.nn.Module, x: torch.Tensor, tmp_path) -> dict:
    """``corpus.check``'s row for ``module`` over ``x``, in the corpus for the call."""
    zoo.CORPUS["probe"] = zoo.Entry("pytorch", lambda small: (module, (x,)))
    try:
        return corpus.check("probe", tmp_path, rounds=0, small=True)
    finally:
        zoo.CORPUS.pop("probe")


def test_a_model_whose_reference_output_is_one_value_is_not_counted_as_matching(tmp_path):
    """A dead model (every output the same: transformers' EfficientNet at its random
    initialisation gave zeros) matches any build; the row stops at ``reference``."""

    class Dead(torch.nn.Module):
        def forward(self, x):
            return torch.relu(-x.abs())

    row = _row_of(Dead(), torch.randn(1, 8), tmp_path)
    assert row["stage"] == "reference" and "one value" in row["error"]


def test_the_row_is_the_round_whose_ratio_is_the_median():
    # the columns' own medians (5 and 6) would read 0.83x beside a median ratio of 1.2x
    ours, theirs = [5.0, 5.0, 6.0, 9.0, 2.0], [6.0, 3.0, 5.0, 6.0, 8.0]
    assert corpus.median_round(ours, theirs) == (6.0, 5.0, 6.0 / 5.0)
    assert corpus.median_round([4.0, 1.0], [2.0, 2.0]) == (1.0, 2.0, 0.5)


class _Gated(torch.nn.Module):
    """A residual block as libraries initialise it for training: its branch's batch norm
    scale at zero (timm's ResNets), a layer scale of 1e-6 (ConvNeXt), a classifier of zeros."""

    def __init__(self) -> None:
        super().__init__()
        self.conv = torch.nn.Conv2d(4, 4, 3, padding=1)
        self.bn = torch.nn.BatchNorm2d(4)
        torch.nn.init.zeros_(self.bn.weight)
        self.gamma = torch.nn.Parameter(torch.full((4,), 1e-6))
        self.head = torch.nn.Linear(4, 3)
        torch.nn.init.zeros_(self.head.weight)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x + self.gamma[:, None, None] * self.bn(self.conv(x))
        return self.head(x.mean((2, 3)))


def _branch_shows(model: torch.nn.Module, x: torch.Tensor) -> bool:
    """Whether changing the branch's convolution moves the output by more than the corpus'
    tolerance, relative to the output's largest value."""
    with torch.no_grad():
        before = model(x)
        model.conv.weight.add_(0.1 * torch.randn_like(model.conv.weight))
        after = model(x)
    scale = float(before.abs().max())
    return scale > 0 and float((after - before).abs().max()) / scale > corpus.TOLERANCE


def test_live_weights_let_every_layer_show_in_the_output():
    torch.manual_seed(0)
    x = torch.randn(1, 4, 6, 6)
    model = _Gated().eval()
    assert not _branch_shows(model, x)  # as initialised: a wrong branch would still match
    drawn = zoo.live_weights(model)
    assert sorted(drawn) == ["bn.weight", "gamma", "head.weight"]
    assert float(model.gamma.min()) >= 0.5 and float(model.gamma.max()) <= 1.0
    assert not float(model.bn.bias.abs().max())  # a zero bias stays zero
    assert _branch_shows(model, x)
    assert zoo.live_weights(model) == []  # nothing left to draw


@pytest.mark.parametrize(
    ("out", "added"),
    [("models", "models_added"), ("models_avx2", "models_added_avx2"), ("zen5", "zen5_added")],
)
def test_the_added_models_table_sits_beside_each_hosts_table(out, added):
    """``corpus.py --out NAME`` writes the rows of ``zoo.ADDED`` to the table beside NAME's."""
    assert corpus.added_name(out) == added


def test_a_timm_model_outside_the_corpus_is_added_under_its_name():
    """``zoo.outside``: ``timm:NAME`` joins the corpus (a benchmark's ``MODEL``); a corpus name
    is left as it is; neither is built here."""
    name = "timm:resnest14d"
    try:
        assert zoo.outside(name) == name and zoo.CORPUS[name].source == "timm"
        assert zoo.outside("resnet18") == "resnet18"
    finally:
        zoo.CORPUS.pop(name, None)


TINY_BERT = (
    "hf:BertModel:hidden_size=64,num_hidden_layers=1,num_attention_heads=2,intermediate_size=128"
)


@pytest.mark.parametrize(
    ("name", "shape", "out"),
    [
        (TINY_BERT, (1, 16), (1, 16, 64)),
        ("hf:ViTModel:hidden_size=32,num_hidden_layers=1,num_attention_heads=2,"
         "intermediate_size=64,image_size=32,patch_size=8", (1, 3, 32, 32), (1, 17, 32)),
        ("hf:PatchTSTModel:num_input_channels=3,d_model=16,num_hidden_layers=1,"
         "num_attention_heads=2,ffn_dim=32,patch_length=16,patch_stride=8", (1, 64, 3),
         (1, 3, 7, 16)),
        ("hf:Wav2Vec2BertModel:hidden_size=32,num_hidden_layers=1,num_attention_heads=2,"
         "intermediate_size=64,output_hidden_size=32", (1, 187, 160), (1, 187, 32)),
        ("hf:ParakeetEncoder:hidden_size=32,num_hidden_layers=1,num_attention_heads=2,"
         "num_key_value_heads=2,intermediate_size=64,subsampling_conv_channels=8,"
         "num_mel_bins=16", (1, 375, 16), (1, 47, 32)),
        ("hf:VitPoseForPoseEstimation:backbone_config={'model_type':'vitpose_backbone',"
         "'image_size':[32,24],'patch_size':[8,8],'hidden_size':16,'num_hidden_layers':1,"
         "'num_attention_heads':2,'intermediate_size':32}", (1, 3, 32, 24), (1, 2, 16, 12)),
        ("hf:DeformableDetrModel:use_timm_backbone=False,use_pretrained_backbone=False,"
         "backbone_config={'model_type':'resnet','hidden_sizes':[8,16],'depths':[1,1],"
         "'embedding_size':8,'out_features':['stage1','stage2']},num_feature_levels=2,"
         "d_model=32,encoder_layers=1,decoder_layers=1,num_queries=5,encoder_attention_heads=2,"
         "decoder_attention_heads=2,encoder_ffn_dim=32,decoder_ffn_dim=32,encoder_n_points=2,"
         "decoder_n_points=2", (1, 3, 224, 224), (1, 5, 32)),
    ],
)  # fmt: skip
def test_a_transformers_class_outside_the_corpus_is_built_from_its_config(name, shape, out):
    """``zoo.outside``: ``hf:CLASS:FIELD=VALUE,...`` joins the corpus as the class built from
    its own config's defaults with those fields (a list or a string as Python writes it), over
    the input its ``main_input_name`` names (token ids; an image of the size its config or its
    backbone's names: ViTPose refuses any other; a time series: 512 steps, 64 at the small
    size, of the config's channels; W2V-BERT's pairs of log-mel frames stacked, 187 of 160 at
    the small size; Parakeet's log-mel frames first, which it takes where bins first fail),
    its output the model's ``last_hidden_state`` where it has one, else its
    first field (Deformable DETR's first field is its learned queries' reference points, which
    no input changes: the corpus refused it). (transformers is a benchmark dependency.)"""
    pytest.importorskip("transformers")
    try:
        assert zoo.outside(name) == name and zoo.CORPUS[name].source == "transformers"
        module, (x,) = zoo.CORPUS[name].make(True)
        assert tuple(x.shape) == shape
        with torch.no_grad():
            assert tuple(module.eval()(x).shape) == out
    finally:
        zoo.CORPUS.pop(name, None)


def test_an_encoder_decoder_transformers_class_is_given_decoder_tokens_too():
    """An encoder-decoder class (T5) takes :data:`zoo.DECODER_TOKENS` decoder tokens beside its
    input (it refuses to run without them); its output, the decoder's states, has their length."""
    pytest.importorskip("transformers")
    name = "hf:T5Model:d_model=32,d_kv=8,d_ff=64,num_layers=1,num_heads=2,vocab_size=100"
    try:
        zoo.outside(name)
        module, (x, tokens) = zoo.CORPUS[name].make(True)
        assert tuple(x.shape) == (1, 16) and tuple(tokens.shape) == (1, zoo.DECODER_TOKENS)
        assert int(tokens.max()) < 100
        with torch.no_grad():
            assert tuple(module.eval()(x, tokens).shape) == (1, zoo.DECODER_TOKENS, 32)
    finally:
        zoo.CORPUS.pop(name, None)


TINY_DETR = (
    "hf:DetrModel:use_timm_backbone=False,use_pretrained_backbone=False,backbone_config="
    "{'model_type':'resnet','hidden_sizes':[8,16],'depths':[1,1],'embedding_size':8,"
    "'out_features':['stage2']},d_model=16,encoder_layers=1,decoder_layers=1,num_queries=5,"
    "encoder_attention_heads=2,decoder_attention_heads=2,encoder_ffn_dim=32,decoder_ffn_dim=32"
)


def test_a_decoder_of_learned_queries_is_given_no_tokens():
    """DETR is an encoder-decoder whose decoder takes learned queries, not tokens: it is built
    over its image alone (its forward would take decoder tokens as an unused keyword, and the
    export gained an input the model never reads)."""
    pytest.importorskip("transformers")
    try:
        zoo.outside(TINY_DETR)
        module, args = zoo.CORPUS[TINY_DETR].make(True)
        assert [tuple(a.shape) for a in args] == [(1, 3, 224, 224)]
        with torch.no_grad():
            assert tuple(module.eval()(*args).shape) == (1, 5, 16)
    finally:
        zoo.CORPUS.pop(TINY_DETR, None)


@pytest.mark.parametrize(
    ("name", "shape"),
    [("tv:mnasnet0_5", (1, 3, 224, 224)), ("tv:video.mc3_18", (1, 3, 16, 112, 112)),
     ("tv:segmentation.lraspp_mobilenet_v3_large", (1, 3, 224, 224))],
)  # fmt: skip
def test_a_torchvision_model_outside_the_corpus_is_added_with_its_familys_input(name, shape):
    """``tv:[FAMILY.]NAME``: torchvision's builder with random weights over an image or 16
    frames; not built here beyond its input."""
    try:
        assert zoo.outside(name) == name and zoo.CORPUS[name].source == "torchvision"
        assert not zoo.CORPUS[name].symbolic
        _, (x,) = zoo.CORPUS[name].build(True)
        assert tuple(x.shape) == shape
    finally:
        zoo.CORPUS.pop(name, None)


def test_a_segmentation_model_returns_its_out_map():
    """A model whose output is one named field and whose inputs go in by position (torchvision's
    segmentation models: their ``out`` map) is called on its inputs as given (a build that
    zipped them with no names failed at export: LR-ASPP's corpus row of 2026-12-06)."""
    module, (x,) = zoo.CORPUS["lraspp_mobilenet_v3"].make(True)
    with torch.no_grad():
        y = module.eval()(x)
    assert tuple(y.shape) == (1, 21, *x.shape[2:])


def test_sym_exports_any_model_with_a_symbolic_batch():
    """``sym:MODEL``: the model ``MODEL`` names (a corpus model, or one of the other forms,
    added too), exported with a symbolic batch."""
    try:
        assert zoo.outside("sym:squeezenet1_1") == "sym:squeezenet1_1"
        assert zoo.CORPUS["sym:squeezenet1_1"].symbolic
        assert zoo.CORPUS["sym:squeezenet1_1"].build is zoo.CORPUS["squeezenet1_1"].build
        assert zoo.outside("sym:tv:mnasnet0_5") in zoo.CORPUS and "tv:mnasnet0_5" in zoo.CORPUS
    finally:
        for name in ("sym:squeezenet1_1", "sym:tv:mnasnet0_5", "tv:mnasnet0_5"):
            zoo.CORPUS.pop(name, None)


@pytest.mark.parametrize(
    "name",
    ["hf:BertModel:num_hidden_layers", "hf:BertModel:a=b", "hf:BertModel:hidden_size=(",
     "hf:BertModel:**x", "hf:Bert Model", "other:resnet18", "tv:nope", "tv:list_models",
     "tv:video.VideoResNet", "tv:quantization.resnet18", "sym:nope"],
)  # fmt: skip
def test_a_name_outside_the_corpus_that_names_no_model_is_left_out(name):
    """A value without its field, a value that is not a literal, a class name that is no
    name, an unknown prefix, no such torchvision builder (or a helper, a class, a family
    without an input here), a symbolic batch of nothing: not added (each benchmark's check
    then names it, exit 2); none of it needs transformers."""
    assert zoo.outside(name) == name and name not in zoo.CORPUS


@pytest.mark.parametrize("name", ["hf:NoSuchModel", "hf:BertConfig", "hf:BertTokenizer"])
def test_a_transformers_name_that_is_no_model_class_is_left_out(name):
    """No such class, a config, a tokenizer: not model classes with an input here."""
    pytest.importorskip("transformers")
    assert zoo.outside(name) == name and name not in zoo.CORPUS


def test_hf_specs_are_a_class_and_literal_fields():
    assert zoo.hf_spec("Swinv2Model:depths=[2,2,2,2],embed_dim=48") == (
        "Swinv2Model",
        {"depths": [2, 2, 2, 2], "embed_dim": 48},
    )
    assert zoo.hf_spec("BigBirdModel:attention_type='original_full'") == (
        "BigBirdModel",
        {"attention_type": "original_full"},
    )
    assert zoo.hf_spec("CvtModel") == ("CvtModel", {})


def test_a_run_of_other_models_keeps_the_rows_of_timm_models_outside_the_corpus(
    tmp_path, monkeypatch
):
    """``corpus.py --only timm:B --out T`` after ``--only timm:A --out T``: table T keeps A's
    row (it had dropped every outside row but the run's, whose names alone had joined the
    corpus), in the corpus's order, and the added models' rows go to their own table."""
    import json

    monkeypatch.setattr(corpus, "RESULTS", tmp_path)
    old = {"model": "timm:resnest14d", "ratio": 1.2}
    added = {"model": next(iter(zoo.ADDED)), "ratio": 0.9}
    (tmp_path / "outside.json").write_text(json.dumps({"rows": [old]}))
    (tmp_path / f"{corpus.added_name('outside')}.json").write_text(json.dumps({"rows": [added]}))
    try:
        rows = corpus.earlier_rows("outside")
        rows[zoo.outside("timm:skresnet18")] = {"model": "timm:skresnet18", "ratio": 0.95}
        tables = corpus.tables("outside", rows)
        assert [r["model"] for r in tables["outside"]] == ["timm:resnest14d", "timm:skresnet18"]
        assert tables[corpus.added_name("outside")] == [added]
    finally:
        for name in ("timm:resnest14d", "timm:skresnet18"):
            zoo.CORPUS.pop(name, None)


def _offset(outputs: list, share: float) -> list:
    """``outputs``, each moved by ``share`` of its largest magnitude."""
    return [o + share * abs(o).max() for o in outputs]


@pytest.mark.parametrize("off", ["ours", "onnx runtime"])
def test_where_ours_and_onnx_runtime_differ_torch_in_float64_says_which_is_off(
    off, tmp_path, monkeypatch
):
    """ONNX Runtime's own output can be the inexact one (ResNetV2-BiT's: 2.4e-3 off float64,
    ours 7.7e-6): the row is judged against torch in float64 where the two differ, and says
    both errors; where ours is the one off, it still fails at ``match``."""
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))
    import ort_timing

    from tvm_hetero import api

    real_session, real_run = ort_timing.cpu_session, api.run

    class Session:
        def __init__(self, *args, **kwargs) -> None:
            self.session = real_session(*args, **kwargs)

        def run(self, names, feeds):
            outputs = self.session.run(names, feeds)
            return _offset(outputs, 0.01) if off == "onnx runtime" else outputs

    monkeypatch.setattr(ort_timing, "cpu_session", Session)
    if off == "ours":
        monkeypatch.setattr(api, "run", lambda *args: _offset(real_run(*args), 0.01))
    row = _row_of(torch.nn.Linear(8, 4), torch.randn(1, 8), tmp_path)
    assert row["rel_err"] > corpus.TOLERANCE
    wrong, right = ("rel_err_f64", "ort_rel_err_f64")[:: 1 if off == "ours" else -1]
    assert row[right] < 1e-6 and row[wrong] > corpus.TOLERANCE
    assert row["stage"] == ("match" if off == "ours" else "time")
    assert f"ONNX Runtime {row['ort_rel_err_f64']:.1e}" in corpus.table([row])


def test_a_model_whose_reference_output_is_subnormal_is_not_counted_as_matching(tmp_path):
    """transformers' MobileViT segmenter at its random initialisation gave logits of 5.6e-43:
    below float32's normal range each runtime rounds or flushes as it likes (ours and ONNX
    Runtime's 6 % apart, each over a fifth off float64), so the row stops at ``reference``."""

    class Faint(torch.nn.Module):
        def forward(self, x):
            return x * 1e-42

    row = _row_of(Faint(), torch.randn(1, 8), tmp_path)
    assert row["stage"] == "reference" and "normal range" in row["error"]


def test_a_model_whose_output_does_not_follow_its_input_is_not_counted_as_matching(tmp_path):
    """torchvision's S3D at PyTorch's default draw: its features vanish (about 1e-7) and its
    output is its classifier's bias for any input, which any build matches; the row stops at
    ``reference``. A model that does follow its input (below) is timed as usual."""

    class BiasOnly(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.bias = torch.nn.Parameter(torch.linspace(-1, 1, 8))

        def forward(self, x):
            return x * 1e-9 + self.bias

    row = _row_of(BiasOnly(), torch.randn(1, 8), tmp_path)
    assert row["stage"] == "reference" and "another input" in row["error"]
    assert _row_of(torch.nn.Linear(8, 8), torch.randn(1, 8), tmp_path)["stage"] == "time"


def test_other_feeds_change_every_input_and_keep_token_ids_valid():
    feeds = {"x": np.ones((1, 4), "float32") * 3, "ids": np.arange(6).reshape(1, 6)}
    other = corpus.other_feeds(feeds)
    assert other["x"].dtype == np.float32 and not np.array_equal(other["x"], feeds["x"])
    assert sorted(other["ids"].ravel()) == sorted(feeds["ids"].ravel())  # the same ids
    assert not np.array_equal(other["ids"], feeds["ids"])


def test_a_stack_whose_output_does_not_follow_its_input_gets_its_convolutions_drawn_again():
    """Twelve convolutions drawn with a standard deviation of 0.01 (GoogLeNet's draw) leave
    the output its last layer's bias; ``make`` draws them again (He's draw, fan in), after
    which the output follows the input. A stack that follows it keeps its weights."""

    def stack(std: float) -> torch.nn.Module:
        layers = [torch.nn.Conv2d(3, 16, 3, padding=1)]
        layers += [torch.nn.Conv2d(16, 16, 3, padding=1) for _ in range(11)]
        model = torch.nn.Sequential(*(m for c in layers for m in (c, torch.nn.ReLU())))
        for c in layers:
            torch.nn.init.normal_(c.weight, std=std)
        return model

    x = torch.randn(1, 3, 8, 8)
    for std, drawn in ((0.01, True), (0.3, False)):
        module = stack(std)
        before = module[0].weight.clone()
        assert zoo.follows_input(module, (x,)) != drawn
        entry = zoo.Entry("pytorch", lambda small, m=module: (m, (x,)))
        made, _ = entry.make(True)
        assert zoo.follows_input(made, (x,))
        assert torch.equal(made[0].weight, before) != drawn


def test_a_stack_whose_norms_shrink_it_gets_them_made_the_identity_too():
    """Eight convolution + batch norm blocks whose norms scale by about a tenth and shift by a
    drawn bias (timm's RepVGG draw): He's draw of the convolutions alone leaves the output the
    shifts', whatever the input; ``make`` then makes the norms the identity, after which the
    output follows the input. A stack that follows after He's draw keeps its norms."""

    def stack(scale: float) -> torch.nn.Module:
        blocks = []
        for k in range(8):
            norm = torch.nn.BatchNorm2d(16)
            torch.nn.init.normal_(norm.weight, scale, 0.01)
            torch.nn.init.normal_(norm.bias, 0.0, 0.1)
            blocks += [torch.nn.Conv2d(3 if k == 0 else 16, 16, 3, padding=1), norm,
                       torch.nn.ReLU()]  # fmt: skip
        return torch.nn.Sequential(*blocks).eval()

    x = torch.randn(1, 3, 8, 8)
    for scale, unit in ((0.05, True), (1.0, False)):
        module = stack(scale)
        entry = zoo.Entry("pytorch", lambda small, m=module: (m, (x,)))
        made, _ = entry.make(True)
        assert zoo.follows_input(made, (x,))
        assert bool(torch.all(made[1].weight == 1.0)) == unit


def test_s3d_takes_frames_of_224_and_a_draw_that_reaches_its_output():
    """torchvision's S3D pools its last 2 x 7 x 7 map whole (frames of 224 x 224) and keeps
    PyTorch's default draw, under which its features are about 4e-7 whatever the input."""
    try:
        zoo.outside("tv:video.s3d")
        model, (x,) = zoo.CORPUS["tv:video.s3d"].make(True)
        assert tuple(x.shape) == (1, 3, 16, 224, 224)
        with torch.no_grad():
            assert float(model.eval().features(x).std()) > 1e-2
    finally:
        zoo.CORPUS.pop("tv:video.s3d", None)


def test_a_spec_too_long_for_a_file_name_gets_a_cut_name_with_its_digest(tmp_path):
    """DeepSeek-V3's spec with its fields is 301 characters; a file's name may have 255."""
    fields = ",".join(f"field_{k}={k}" for k in range(30))
    long, other = f"hf:DeepseekV3ForCausalLM:{fields}", f"hf:DeepseekV3ForCausalLM:{fields},x=1"
    path = zoo.onnx_path(tmp_path, long, "-small")
    assert len(path.name) <= 255 and path.name.endswith(".onnx")
    assert path != zoo.onnx_path(tmp_path, other, "-small")  # the digest tells them apart
    path.write_bytes(b"")  # the file system takes it
    assert zoo.onnx_path(tmp_path, "resnet18") == tmp_path / "resnet18.onnx"
