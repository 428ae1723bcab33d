from __future__ import annotations

import json
import subprocess
import sys

import pytest

from drillbook.cli import main


def test_console_script_prints_usage():
    out = subprocess.run([sys.executable, "-m", "drillbook.cli", "--help"],
                         capture_output=True, text=True, check=True).stdout
    assert out.startswith("usage: drillbook") and "synthetic-rank" in out


def test_no_command_prints_help(capsys):
    assert main([]) == 0
    assert "usage: drillbook" in capsys.readouterr().out


def test_heads_lists_every_kind(capsys):
    main(["heads"])
    out = capsys.readouterr().out
    assert "softmax" in out and "tied" in out and "Eq. 2" in out


def test_synthetic_rank_json(capsys):
    assert main(["synthetic-rank", "--contexts", "60", "--vocab", "16", "--logit-rank", "16",
                 "--dims", "2", "4", "--steps", "50", "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["true_rank"] == 16
    assert [f["rank_numpy_tol"] for f in report["fits"]] == [4, 6]


def test_bad_arguments_exit_2_with_a_message(capsys):
    with pytest.raises(SystemExit) as exc:
        main(["synthetic-rank", "--vocab", "8", "--logit-rank", "9"])
    assert exc.value.code == 2
    assert "cannot exceed --vocab" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        main(["synthetic-rank", "--dims", "0"])
    assert "positive integer" in capsys.readouterr().err
