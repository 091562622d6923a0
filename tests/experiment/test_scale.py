"""``--scale`` multiplies a generated dataset's sizes in Python, never in float32:
a scale too small is refused by what the dataset would lack, not by float32."""

import re

import pytest

from sparsegcn._checks import check_hyperparameter
from sparsegcn.cli import main
from sparsegcn.experiment import Experiment


@pytest.mark.parametrize(
    ("dataset", "scale", "words"),
    [
        # Both round to 0 in float32, which the message named before.
        ("synthetic:tiny", "1e-300", "has 1 node(s) and an empty 'valid' split"),
        ("synthetic:tiny", "5e-324", "has 1 node(s) and an empty 'valid' split"),
        # Splits fit, edges do not: refused before drawing, naming a scale.
        ("synthetic:arxiv", "0.0003", "has 350 edges on 51 nodes, too dense"),
    ],
)
def test_a_scale_too_small_names_what_is_lacking_and_a_scale_that_generates(
    dataset, scale, words, tmp_path, capsys
):
    argv = ["train", "--dataset", dataset, "--scale", scale, "--epochs", "1"]
    argv += ["--root", str(tmp_path), "--no-progress"]
    assert main(argv) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "float32" not in err
    assert f"{dataset} at scale {float(scale):g} {words}" in err
    assert "; use a larger --scale (e.g. " in err
    # The scale suggested generates (before: tiny's 0.0049 was too dense to draw).
    suggested = re.search(r"e\.g\. ([0-9.e-]+)\)", err).group(1)
    argv[argv.index(scale)] = suggested
    assert main(argv) == 0, capsys.readouterr().err


def test_scale_is_not_held_to_float32_but_compiled_settings_are():
    assert check_hyperparameter("scale", 1e-300) == 1e-300
    # synthetic:proteins keeps 64 nodes at any scale: 1e-300 is a valid run.
    assert Experiment(dataset="synthetic:proteins", scale=1e-300).scale == 1e-300
    with pytest.raises(ValueError, match=r"scale must be > 0.0 and <= 1.0, got 0.0 \(--scale\)"):
        check_hyperparameter("scale", 0.0, flag="--scale")
    with pytest.raises(ValueError, match="learning_rate = 1e-300 is not representable in float32"):
        check_hyperparameter("learning_rate", 1e-300)
