"""A file where a loader needs a folder (the root, or the dataset's folder under it) is
named as such, before anything is read or downloaded, and left as it is."""

from __future__ import annotations

from pathlib import Path

import pytest

from sparsegcn.datasets.planetoid import load_planetoid
from sparsegcn.datasets.tu import load_tu

# Nothing listens on port 9 (discard): a load that got as far as downloading fails
# there, with another message.
NOWHERE = "http://127.0.0.1:9/"

LOADERS = {
    "planetoid": lambda root: load_planetoid("cora", root, base_url=NOWHERE),
    "tu": lambda root: load_tu("tu:MUTAG", root, url=NOWHERE + "MUTAG.zip"),
}


@pytest.mark.parametrize(
    ("loader", "file", "root", "message"),
    [
        # Before: "[Errno 17] File exists: '<root>/planetoid'".
        (
            "planetoid",
            "planetoid",
            ".",
            r"Planetoid's folder '{t}/planetoid' exists but is not a directory: it is a file",
        ),
        # Before: "[Errno 20] Not a directory: '<t>/afile/sub/planetoid'".
        (
            "planetoid",
            "afile",
            "afile/sub",
            r"cannot create root '{t}/afile/sub': '{t}/afile' exists but is not a directory",
        ),
        # Before: "cannot write <t>/afile/tu/MUTAG: Not a directory".
        ("tu", "afile", "afile", r"root '{t}/afile' exists but is not a directory: it is a file"),
        (
            "tu",
            "afile",
            "afile/sub",
            r"cannot create root '{t}/afile/sub': '{t}/afile' exists but is not a directory",
        ),
        # Before: "<t>/tu/MUTAG/MUTAG_A.txt is missing ... delete <t>/tu/MUTAG ...".
        (
            "tu",
            "tu/MUTAG",
            ".",
            r"tu:MUTAG's folder '{t}/tu/MUTAG' exists but is not a directory: it is a file",
        ),
        (
            "tu",
            "tu",
            ".",
            r"cannot create tu:MUTAG's folder '{t}/tu/MUTAG': '{t}/tu' exists but is not a dir",
        ),
    ],
)
def test_a_file_in_place_of_a_folder_is_named(tmp_path, loader, file, root, message):
    path = tmp_path / file
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("mine")
    with pytest.raises(ValueError, match=message.format(t=tmp_path)):
        LOADERS[loader](tmp_path / root)
    assert path.read_text() == "mine"
    made = {p.relative_to(tmp_path).as_posix() for p in tmp_path.rglob("*")}
    assert made == {file, *(p.as_posix() for p in Path(file).parents[:-1])}  # nothing else
