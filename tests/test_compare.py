"""compare pairs listings by process name and directory (present/pairing.py), names them in its
rows, and gives JSON of records with null where it cannot tell."""

import json
import os

import pytest

from conftest import FIXTURES, run_cli

MULTI_510 = os.path.join(FIXTURES, "multi-5.10")
MULTI_61 = os.path.join(FIXTURES, "multi-6.1")


@pytest.fixture(scope="module")
def compared():
    """compare --json of the two multi-reader runs, as printed (read once for the module)."""
    return run_cli("compare", "--json", MULTI_510, MULTI_61, check=0).stdout


def test_readers_pair_by_process_and_directory_not_by_position(compared):
    out = json.loads(compared)
    rows = {(r["process"], r["dir"], r["nth"]): r for r in out["listings"]}
    # By position, the third listing of 5.10 (ls of dir 12: 44 READDIRs, 3 restarts) met an
    # unrelated 1-READDIR listing of 6.1; paired, it meets the 6.1 ls of dir 12.
    ls = rows[("ls", 12, 1)]
    assert ls["before"]["readdirs"] == 44 and ls["before"]["restarts"] == 3
    assert ls["after"]["readdirs"] > 1 and ls["after"]["restarts"] == 0
    assert ls["ratio"]["restarts"] == 0
    small = rows[("ls", 13, 1)]
    assert small["before"]["readdirs"] == small["after"]["readdirs"] == 1
    # Every listing of either side appears once.
    for side, path in (("before", MULTI_510), ("after", MULTI_61)):
        js = json.loads(run_cli("analyze", "--json", path, check=0).stdout)
        n = sum(len(t["listings"]) for t in js)
        assert sum(r[side] is not None for r in out["listings"]) == n


def test_json_has_records_and_null_where_it_cannot_tell(compared):
    text = compared
    out = json.loads(text)
    assert "cannot tell" not in text and "('" not in text
    row = out["listings"][0]
    # entries: the multi readers write no count of names into the trace.
    assert row["before"]["entries"] is None and row["ratio"]["entries"] is None
    assert set(row) >= {"process", "dir", "phase", "nth", "before", "after", "ratio"}


def test_text_rows_say_which_process_and_directory():
    text = run_cli("compare", MULTI_510, MULTI_61, check=0).stdout
    assert "ls dir 12 " in text and "multi-reader dir 12 #2" in text
    assert "listing 3" not in text


def test_one_reproducer_on_two_kernels_pairs_every_listing():
    out = json.loads(
        run_cli(
            "compare",
            "--json",
            os.path.join(FIXTURES, "5.10-v4.1"),
            os.path.join(FIXTURES, "6.1-v4.1"),
            check=0,
        ).stdout
    )
    assert out["listings"] and all(r["before"] and r["after"] for r in out["listings"])


def test_directories_with_other_inode_numbers_pair_by_size_and_order(compared):
    """find walks the same tree in both VMs, whose 36 subdirectories have other inode numbers:
    they pair in the order first listed; what one side has alone is named so."""
    rows = json.loads(compared)["listings"]
    finds = [r for r in rows if r["process"] == "find" and r["dir"] not in (None, 14)]
    assert len(finds) == 36 and all(r["before"] and r["after"] for r in finds), len(finds)
    assert all(r["dir_after"] != r["dir"] for r in finds)
    alone = [r for r in rows if not (r["before"] and r["after"])]
    assert alone and all(r["listing"].endswith(("only in A", "only in B")) for r in alone)


def test_ratios_keep_the_digits_they_need():
    from nfsreaddir.present.compare import ratio, ratio_text

    assert ratio(8314, 16) == 0.00192 and ratio_text(ratio(8314, 16)) == "0.00192"
    assert ratio_text(ratio(5, 0)) == "0" and ratio_text(ratio(4, 4)) == "1"
    assert ratio(0, 3) is None and ratio_text(None) == "-"
