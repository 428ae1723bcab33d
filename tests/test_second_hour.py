"""The second hour of a new user: every path the command line writes and every file it
reads fails in one line that names it and what to do, options that do not apply are
refused, ``translate`` keeps lines, and long work says what it will cost.

Every test runs the real command in a subprocess (``python -m drillbook.cli``) and
checks the exit status, the one line on standard error, and that nothing was lost or left
behind (the test's folder and the process's temporary folder compared before and after).
A read-only disk, which stops root too, is made by ``tests/readonly.py`` at the operating
system's boundary. The trained runs are tiny and made once per session.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from test_cli import MICRO, needs_data

TESTS = Path(__file__).resolve().parent
ROOT = TESTS.parent
BOOK_RESULTS = ROOT / "drillbook" / "results"
needs_multi30k = pytest.mark.skipif(
    not (Path(os.environ.get("DRILLBOOK_DATA", "/nonexistent")) / "multi30k").is_dir(),
    reason="needs Multi30k: set DRILLBOOK_DATA (make test points it at ../shared/data)")


# ------------------------------------------------------------------ running the command
def drillbook(*args, cwd: Path, env: dict | None = None, stdin: bytes | None = None,
              readonly=(), stdout=subprocess.PIPE, stderr=subprocess.PIPE,
              timeout: float = 600) -> subprocess.CompletedProcess:
    """``drillbook ARGS`` in a new process, in ``cwd``, with its temporary folder in
    ``cwd/.tmp`` (checked afterwards: nothing left behind); ``env`` values of None
    remove a variable; ``readonly`` paths cannot be written (``tests/readonly.py``)."""
    environ = {**os.environ, "TQDM_DISABLE": "1"}
    tmp = cwd / ".tmp"
    tmp.mkdir(exist_ok=True)
    environ["TMPDIR"] = str(tmp)
    for key, value in (env or {}).items():
        if value is None:
            environ.pop(key, None)
        else:
            environ[key] = str(value)
    command = [sys.executable, "-m", "drillbook.cli"]
    if readonly:
        environ["DRILLBOOK_TEST_READONLY"] = os.pathsep.join(map(str, readonly))
        command = [sys.executable, str(TESTS / "readonly.py")]
    done = subprocess.run([*command, *map(str, args)], cwd=cwd, env=environ, input=stdin,
                          stdout=stdout, stderr=stderr, timeout=timeout)
    # torch keeps a cache of its compiler there (torchinductor_<user>), for every run
    assert [p for p in tmp.iterdir() if not p.name.startswith("torchinductor_")] == [], \
        "left in the temporary folder"
    shutil.rmtree(tmp)
    return done


def refused(done: subprocess.CompletedProcess, *words: str) -> str:
    """The one ``drillbook: error:`` line of a command that exited with status 2 and
    printed nothing else; it holds each of ``words``."""
    err = done.stderr.decode()
    assert done.returncode == 2, err
    assert err.count("\n") == 1 and err.startswith("drillbook: error: "), err
    assert not done.stdout, done.stdout
    for word in words:
        assert word in err, (word, err)
    return err.strip()


def state(folder: Path) -> dict[str, tuple[int, int] | None]:
    """Every file under ``folder`` -> (size, modification time), and every folder."""
    return {str(p.relative_to(folder)): (p.stat().st_size, p.stat().st_mtime_ns)
            if p.is_file() else None
            for p in sorted(folder.rglob("*")) if ".tmp" not in p.relative_to(folder).parts}


def copy_run(run: Path, where: Path) -> Path:
    return Path(shutil.copytree(run, where / run.name))


def options(command: str) -> set[str]:
    """The flags ``drillbook COMMAND`` accepts."""
    from drillbook.cli import build_parser

    sub = next(a for a in build_parser()._actions if a.dest == "command").choices[command]
    return {flag for action in sub._actions for flag in action.option_strings}


def advice_flags(line: str) -> set[str]:
    """The ``--flags`` a message advises outside the commands it quotes in backticks."""
    return set(re.findall(r"(?<![\w-])--[a-z][\w-]*", re.sub(r"`[^`]*`", "", line)))


# ------------------------------------------------------------------ tiny runs, made once
@pytest.fixture(scope="session")
def lm_run(tmp_path_factory) -> Path:
    """A language-model run of one tiny epoch on PTB, trained with standard error on a
    full disk (/dev/full): progress that cannot be shown does not stop the work."""
    if not (Path(os.environ.get("DRILLBOOK_DATA", "/nonexistent")) / "ptb").is_dir():
        pytest.skip("needs the corpora: set DRILLBOOK_DATA")
    where = tmp_path_factory.mktemp("lm")
    with open("/dev/full", "wb") as full:
        done = drillbook("train", "tutorial/ptb-tied", "--set", *MICRO, "--out", "run",
                         cwd=where, stderr=full)
    assert done.returncode == 0 and b"stopped (done) after 1 epoch" in done.stdout
    return where / "run"


@pytest.fixture(scope="session")
def early_run(tmp_path_factory) -> tuple[Path, str]:
    """A language-model run stopped by --max-minutes in its first epoch (a last.pt, no
    best.pt), and what the command printed."""
    if not (Path(os.environ.get("DRILLBOOK_DATA", "/nonexistent")) / "ptb").is_dir():
        pytest.skip("needs the corpora: set DRILLBOOK_DATA")
    where = tmp_path_factory.mktemp("early")
    done = drillbook("train", "tutorial/ptb-tied", "--set", *MICRO, "--out", "run",
                     "--max-minutes", "0.0001", "--quiet", cwd=where)
    assert done.returncode == 0, done.stderr
    return where / "run", done.stdout.decode()


@pytest.fixture(scope="session")
def nmt_run(tmp_path_factory) -> Path:
    """A translation run of one tiny epoch on 300 Multi30k pairs."""
    if not (Path(os.environ.get("DRILLBOOK_DATA", "/nonexistent")) / "multi30k").is_dir():
        pytest.skip("needs Multi30k: set DRILLBOOK_DATA")
    where = tmp_path_factory.mktemp("nmt")
    done = drillbook("train", "multi30k/de-en-softmax-tutorial", "--set",
                     "data.max_train_pairs=300", "model.emb_size=16", "model.hidden=16",
                     "train.epochs=1", "train.max_eval_pairs=20", "train.max_len=10",
                     "--out", "run", "--quiet", cwd=where)
    assert done.returncode == 0, done.stderr
    return where / "run"


def config_only(folder: Path, name: str = "tutorial/ptb-tied") -> Path:
    """A run folder holding only ``config.json`` (what the checks before any reading
    need)."""
    from drillbook.configs import get_config

    folder.mkdir()
    (folder / "config.json").write_text(json.dumps(get_config(name).to_dict()))
    return folder


# ------------------------------------------------------------------ 1. what it writes
#: every path the command line writes, given by an option: (the command with its path at
#: ``{path}``, the option, a file or a folder, and what stands in its way: a file where a
#: folder goes or a folder where a file goes, a path under a file, or a read-only disk)
WRITERS = [
    (["train", "tutorial/ptb-tied", "--out", "{path}"], "--out", "folder", "wrong kind"),
    (["finetune", "run", "--out", "{path}"], "--out", "folder", "under a file"),
    (["eval", "run", "--dynamic", "--dyn-state", "{path}"], "--dyn-state", "file",
     "wrong kind"),
    (["report", "--results", "results", "--out", "{path}"], "--out", "file", "wrong kind"),
    (["report", "--results", "results", "--figures", "{path}"], "--figures", "folder",
     "read-only"),
    (["reproduce", "tutorial", "--out", "{path}"], "--out", "folder", "read-only"),
    (["reproduce", "tutorial", "--runs", "{path}"], "--runs", "folder", "under a file"),
    (["reproduce", "tutorial", "--pack", "{path}.tar.gz"], "--pack", "file", "under a file"),
    (["bench", "heads", "--out", "{path}"], "--out", "file", "read-only"),
]

#: what each obstacle is made of, and what the line says of it
OBSTACLES = {
    ("wrong kind", "folder"): ("afile", "is a file, not a folder"),
    ("wrong kind", "file"): ("afolder", "is a folder, not a file"),
    ("under a file", "folder"): ("afile/sub", "is a file, so no folder can be made under it"),
    ("under a file", "file"): ("afile/sub", "is a file, so no file can be made under it"),
    ("read-only", "folder"): ("ro/sub", "cannot be written (Read-only file system)"),
    ("read-only", "file"): ("ro/sub", "cannot be written (Read-only file system)"),
}


@pytest.mark.parametrize(("argv", "option", "kind", "obstacle"), WRITERS,
                         ids=[f"{a[0]} {o} {w}" for a, o, _, w in WRITERS])
def test_a_path_that_cannot_be_written_is_refused_before_any_work(tmp_path, argv, option,
                                                                   kind, obstacle):
    """Each writer meets one obstacle here (the check is one function); each obstacle
    meets writers of files and of folders."""
    config_only(tmp_path / "run")
    shutil.copytree(BOOK_RESULTS / "tutorial", tmp_path / "results" / "tutorial")
    (tmp_path / "afile").write_text("a file\n")
    (tmp_path / "afolder").mkdir()
    (tmp_path / "afolder.tar.gz").mkdir()
    (tmp_path / "ro").mkdir()
    target, expected = OBSTACLES[obstacle, kind]
    argv = [a.replace("{path}", target) for a in argv]
    given = argv[argv.index(option) + 1]
    before = state(tmp_path)
    done = drillbook(*argv, cwd=tmp_path, readonly=[tmp_path / "ro"])
    line = refused(done, f"{option} {given}", expected)
    assert advice_flags(line) <= options(argv[0]) | {option}, line
    assert state(tmp_path) == before  # nothing written, nothing lost


def test_a_read_only_run_folder_is_refused_by_every_command_that_writes_in_it(tmp_path):
    """``train --resume``, ``finetune`` and ``eval --dynamic`` write into the run folder
    (its checkpoints, its ``finetune`` folder, the state file)."""
    run = config_only(tmp_path / "run")
    (run / "last.pt").write_bytes(b"a checkpoint")
    before = state(tmp_path)
    for argv, option in ((["train", "tutorial/ptb-tied", "--out", "run", "--resume"], "--out run"),
                         (["finetune", "run"], "--out run/finetune"),
                         (["eval", "run", "--dynamic"], "--dyn-state run/dynamic-eval")):
        refused(drillbook(*argv, cwd=tmp_path, readonly=[run]), option,
                "Read-only file system")
    assert state(tmp_path) == before


def test_a_write_that_fails_after_the_checks_is_one_line_and_leaves_nothing(tmp_path):
    """The checks pass and the write itself fails: the run's lock file, a report's
    file."""
    run = config_only(tmp_path / "run")
    (run / "last.pt").write_bytes(b"a checkpoint")
    shutil.copytree(BOOK_RESULTS / "tutorial", tmp_path / "results" / "tutorial")
    (tmp_path / "report.md").write_text("the old report\n")
    before = state(tmp_path)
    refused(drillbook("train", "--config", "run/config.json", "--out", "run", "--resume",
                      cwd=tmp_path, readonly=[run / ".lock"]),
            "cannot write in the run folder run", "Read-only file system", "--out")
    refused(drillbook("report", "--results", "results", "--out", "report.md", cwd=tmp_path,
                      readonly=[tmp_path / "report.md"]),
            "could not write --out report.md (Read-only file system)")
    assert state(tmp_path) == before  # the old report is kept, no temporary file is left


@pytest.mark.parametrize(("env", "expected"), [
    ({"DRILLBOOK_DATA": "afile"}, "the data root afile (taken from $DRILLBOOK_DATA) is a "
                                  "file, not a folder"),
    ({"DRILLBOOK_DATA": "afile/data"}, "cannot write the corpus folder"),
    ({"DRILLBOOK_DATA": None, "XDG_CACHE_HOME": None, "HOME": "{tmp}/afile"},
     "the data root is taken from the default cache folder (~/.cache/drillbook)"),
])
def test_a_data_folder_that_cannot_be_written(tmp_path, env, expected):
    (tmp_path / "afile").write_text("a file\n")
    env = {k: v if v is None else v.replace("{tmp}", str(tmp_path)) for k, v in env.items()}
    before = state(tmp_path)
    for argv in (["data", "download", "ptb"], ["train", "tutorial/ptb-tied", "--out", "run"]):
        line = refused(drillbook(*argv, cwd=tmp_path, env=env), expected, "DRILLBOOK_DATA")
        assert "network" not in line  # refused before any download
    assert state(tmp_path) == before


def test_a_read_only_data_folder(tmp_path):
    (tmp_path / "data").mkdir()
    refused(drillbook("data", "download", "ptb", cwd=tmp_path, env={"DRILLBOOK_DATA": "data"},
                      readonly=[tmp_path / "data"]),
            "cannot write the corpus folder data/ptb (Read-only file system",
            "set $DRILLBOOK_DATA to a folder that can be written")
    assert list((tmp_path / "data").iterdir()) == []


@pytest.mark.parametrize("argv", [["configs"], ["--help"], ["info"]])
def test_a_full_standard_output_is_one_line(tmp_path, argv):
    with open("/dev/full", "wb") as full:
        done = drillbook(*argv, cwd=tmp_path, stdout=full)
    done.stdout = b""
    refused(done, "could not write to standard output (No space left on device)")


def test_a_full_standard_error_loses_the_progress_not_the_work(lm_run):
    """The shared run was trained with standard error on a full disk: it finished, and
    its folder is whole."""
    assert {p.name for p in lm_run.iterdir()} == {"config.json", "log.jsonl", "last.pt",
                                                  "best.pt"}


def test_the_output_of_a_run_reader_on_a_full_disk(tmp_path, lm_run):
    with open("/dev/full", "wb") as full:
        done = drillbook("eval", lm_run, "--max-tokens", "50", "--json", cwd=tmp_path,
                         stdout=full)
    done.stdout = b""
    refused(done, "could not write to standard output")


# ------------------------------------------------------------------ 2. what it reads
@pytest.fixture
def edited_run(tmp_path, lm_run) -> Path:
    """A copy of the run whose config.json was edited after training (model.nhid)."""
    run = copy_run(lm_run, tmp_path)
    config = json.loads((run / "config.json").read_text())
    config["model"]["nhid"] = 20
    (run / "config.json").write_text(json.dumps(config))
    return run


@pytest.mark.parametrize(("argv", "checkpoint"), [
    (["eval", "run", "--max-tokens", "50"], "best.pt"),
    (["rank", "run", "--max-tokens", "50"], "best.pt"),
    (["eval", "run", "--dynamic", "--max-tokens", "10", "--dyn-grad-batches", "1"], "best.pt"),
    (["finetune", "run"], "best.pt"),
    (["train", "--config", "run/config.json", "--out", "run", "--resume"], "last.pt"),
], ids=["eval", "rank", "eval --dynamic", "finetune", "train --resume"])
def test_a_checkpoint_that_does_not_fit_the_config_names_both_files(tmp_path, edited_run,
                                                                     argv, checkpoint):
    before = state(tmp_path)
    refused(drillbook(*argv, cwd=tmp_path),
            f"run/{checkpoint} does not fit the model run/config.json describes",
            "encoder.rnns.0.weight_ih_l0 is [64, 16] in the checkpoint and [80, 16] in the "
            "config's model", "put the run's own config.json")
    assert state(tmp_path) == before


def test_a_checkpoint_of_another_head_names_the_weights_it_lacks(tmp_path, lm_run):
    run = copy_run(lm_run, tmp_path)
    config = json.loads((run / "config.json").read_text())
    config["head"]["kind"] = "softmax"  # an untied head has a weight the tied one lacks
    (run / "config.json").write_text(json.dumps(config))
    refused(drillbook("eval", "run", cwd=tmp_path),
            "run/best.pt does not fit the model run/config.json describes: the config's model "
            "has 1 weight(s) the checkpoint lacks (head.weight)")


@needs_multi30k
def test_a_translation_checkpoint_that_does_not_fit(tmp_path, nmt_run):
    run = copy_run(nmt_run, tmp_path)
    config = json.loads((run / "config.json").read_text())
    config["model"]["hidden"] = 20
    (run / "config.json").write_text(json.dumps(config))
    for argv in (["eval", "run"], ["translate", "run"]):
        refused(drillbook(*argv, cwd=tmp_path, stdin=b"ein hund .\n"),
                "run/best.pt does not fit the model run/config.json describes")


def test_report_of_a_corrupt_archive_a_result_file_or_another_file(tmp_path):
    from drillbook.experiments.results import pack_results

    shutil.copytree(BOOK_RESULTS / "tutorial", tmp_path / "results" / "tutorial")
    pack_results(tmp_path / "results", tmp_path / "good.tar.gz")
    data = (tmp_path / "good.tar.gz").read_bytes()
    (tmp_path / "cut.tar.gz").write_bytes(data[: len(data) // 2])  # truncated on the way
    (tmp_path / "text.tar.gz").write_text("not an archive\n")
    (tmp_path / "notes.txt").write_text("notes\n")
    before = state(tmp_path)
    for name in ("cut.tar.gz", "text.tar.gz"):
        refused(drillbook("report", "--results", name, cwd=tmp_path),
                f"{name} is not a readable results archive", "--pack")
    refused(drillbook("report", "--results", "results/tutorial/tied.json", cwd=tmp_path),
            "--results results/tutorial/tied.json is one result file",
            "--results results")
    refused(drillbook("report", "--results", "notes.txt", cwd=tmp_path),
            "--results notes.txt is a file, neither a results folder nor an archive")
    assert state(tmp_path) == before
    done = drillbook("report", "--results", "good.tar.gz", cwd=tmp_path)  # unpacked, removed
    assert done.returncode == 0 and b"tutorial" in done.stdout


@pytest.mark.parametrize("suffix", ["json", "yaml", "toml"])
def test_config_files_as_editors_save_them(tmp_path, suffix):
    """A byte-order mark and Windows line ends."""
    if suffix == "yaml":
        pytest.importorskip("yaml")
    if suffix == "toml":
        pytest.importorskip("tomllib")
    from drillbook.configs import dump_config, get_config

    config = get_config("tutorial/ptb-tied")
    if suffix == "toml":
        d = config.to_dict()
        text = "\n".join([f'name = "{d["name"]}"', f'task = "{d["task"]}"', *[
            f"[{section}]\n" + "\n".join(f"{k} = {json.dumps(v)}" for k, v in d[section].items()
                                         if v is not None and not isinstance(v, dict))
            for section in ("data", "model", "head", "train")]])
    else:
        text = dump_config(config, suffix)
    (tmp_path / f"run.{suffix}").write_bytes(b"\xef\xbb\xbf" + text.replace("\n", "\r\n")
                                             .encode())
    done = drillbook("params", "--config", f"run.{suffix}", "--json", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["config"] == "tutorial/ptb-tied"


def test_a_run_config_with_a_byte_order_mark(tmp_path, lm_run):
    run = copy_run(lm_run, tmp_path)
    (run / "config.json").write_bytes(b"\xef\xbb\xbf" + (run / "config.json").read_bytes())
    done = drillbook("eval", "run", "--max-tokens", "50", "--json", cwd=tmp_path)
    assert done.returncode == 0 and json.loads(done.stdout)["tokens"] >= 50


@pytest.mark.parametrize(("argv", "words"), [
    (["train", "tutorial/ptb-tied", "--set", "train.seed=99999999999999999999"],
     ["invalid train.seed=99999999999999999999", "[-2**63, 2**63)"]),
    (["params", "--config", "."], [". is a folder, not a config file"]),
    (["params", "tutorial/ptb-tied", "--set", "model.encoder=transformer", "model.nhead=2",
      "model.max_len=8"], ["invalid model.max_len=8", "train.bptt=35"]),
])
def test_values_and_files_that_do_not_fit(tmp_path, argv, words):
    refused(drillbook(*argv, cwd=tmp_path), *words)
    assert not (tmp_path / "runs").exists()


def test_a_seed_out_of_range_in_a_config_file_or_an_option(tmp_path):
    from drillbook.configs import get_config

    d = get_config("tutorial/ptb-tied").to_dict()
    d["train"]["seed"] = 2**70
    (tmp_path / "run.json").write_text(json.dumps(d))
    refused(drillbook("train", "--config", "run.json", cwd=tmp_path), "run.json",
            f"train.seed={2**70}")
    for argv in (["reproduce", "tutorial", "--seed", str(2**70)],
                 ["synthetic-rank", "--seed", str(2**70)]):
        done = drillbook(*argv, cwd=tmp_path)  # an argument error: usage and one line
        assert done.returncode == 2 and b"expected an integer in [-2**63, 2**63)" in done.stderr
        assert b"Traceback" not in done.stderr


@pytest.mark.parametrize(("key", "argv"), [
    ("train.test_batch_size", ["eval", "run"]),
    ("train.test_batch_size", ["rank", "run"]),
    ("train.eval_batch_size", ["eval", "run", "--split", "valid"]),
])
def test_a_batch_wider_than_the_split_names_its_key(tmp_path, lm_run, key, argv):
    run = copy_run(lm_run, tmp_path)
    config = json.loads((run / "config.json").read_text())
    config["train"][key.split(".")[1]] = 10**8
    (run / "config.json").write_text(json.dumps(config))
    refused(drillbook(*argv, cwd=tmp_path), f"{key}=100000000 leaves no batch", f"lower {key}")


def test_a_window_longer_than_the_text_names_its_key(tmp_path):
    refused(drillbook("train", "tutorial/ptb-tied", "--set", *MICRO, "train.bptt=100000000",
                      "--out", "run", cwd=tmp_path),
            "train.bptt=100000000 is longer than a column of the train text", "lower train.bptt")
    assert not (tmp_path / "run").exists()


def test_a_device_in_any_form_torch_takes(tmp_path, lm_run):
    """``cpu:0`` was blamed on the checkpoint (torch cannot map a file to it)."""
    done = drillbook("eval", lm_run, "--device", "cpu:0", "--max-tokens", "50", cwd=tmp_path)
    assert done.returncode == 0, done.stderr


@pytest.mark.parametrize("device", ["CPU", "xpu:0"])
def test_a_device_that_is_none_is_refused_as_a_device(tmp_path, device):
    config_only(tmp_path / "run")
    refused(drillbook("eval", "run", "--device", device, cwd=tmp_path),
            f"unknown device {device!r}; use cpu, cuda, cuda:N or mps")


# ------------------------------------------------------------------ 3. options that do not apply
@pytest.mark.parametrize(("run", "argv", "words"), [
    ("tutorial/ptb-tied", ["eval", "run", "--beam", "5"],
     ["--beam 5 works on translation runs; run is a language-model run", "drop --beam"]),
    ("tutorial/ptb-tied", ["eval", "run", "--beam", "1"], ["--beam 1 works on translation"]),
    ("tutorial/ptb-tied", ["translate", "run"], ["translate works on translation runs"]),
    ("multi30k/de-en-softmax", ["eval", "run", "--dynamic"],
     ["--dynamic works on language-model runs; run is a translation run", "drop --dynamic"]),
    ("multi30k/de-en-softmax", ["rank", "run"], ["rank works on language-model runs"]),
    ("multi30k/de-en-softmax", ["finetune", "run"], ["finetune works on language-model runs"]),
])
def test_what_a_task_does_not_take_is_refused_naming_the_task_that_does(tmp_path, run, argv,
                                                                         words):
    config_only(tmp_path / "run", run)
    line = refused(drillbook(*argv, cwd=tmp_path, stdin=b"ein hund .\n"), *words)
    assert advice_flags(line) <= options(argv[0])


@pytest.mark.parametrize(("argv", "words"), [
    (["reproduce", "tutorial", "--dry-run", "--rows", "drill", "--budget-minutes", "1"],
     ["--dry-run trains nothing", "drop --rows, --budget-minutes"]),
    (["reproduce", "tutorial", "--dry-run", "--pack", "x.tar.gz", "--out", "elsewhere"],
     ["drop --out, --pack"]),
    (["reproduce", "gpu-ptb", "--dry-run", "--seed", "3"], ["drop --seed"]),
    (["reproduce", "gpu-small", "--dry-run", "--runs", "elsewhere"], ["drop --runs"]),
    (["reproduce", "laptop-lm", "--dry-run", "cpu", "--continue-from", "nowhere"],
     ["--continue-from nowhere: no such folder"]),
    (["reproduce", "tutorial", "--reserve-minutes", "1"],
     ["--reserve-minutes applies to rows run side by side"]),
    (["reproduce", "tutorial", "--pack", "results.zip"], ["--pack results.zip: name it *.tar.gz"]),
    (["data", "verify", "ptb", "--force"], ["--force goes with `drillbook data download`"]),
    (["data", "where", "ptb"], ["drop the corpus names"]),
])
def test_an_option_a_mode_ignores_is_refused(tmp_path, argv, words):
    line = refused(drillbook(*argv, cwd=tmp_path), *words)
    assert advice_flags(line) <= options(argv[0])
    assert list(tmp_path.iterdir()) == []


def test_finetune_refuses_a_run_that_is_still_training(tmp_path):
    from drillbook.train.lock import RunLock

    run = config_only(tmp_path / "run")
    (run / "best.pt").write_bytes(b"weights")
    lock = RunLock(run)
    lock.acquire()  # as a trainer holds it
    try:
        before = state(tmp_path)
        refused(drillbook("finetune", "run", cwd=tmp_path),
                f"run is still training (pid {os.getpid()})", "snapshot of its best.pt")
        assert state(tmp_path) == before
    finally:
        lock.release()


@pytest.mark.slow
def test_a_run_without_a_finished_epoch_gets_advice_each_command_takes(tmp_path, early_run):
    run, printed = early_run
    assert "stopped (budget) after 0 epoch(s); no epoch finished" in printed
    assert "continue with the same command plus --resume" in printed  # --max-minutes
    run = copy_run(run, tmp_path)
    assert {p.name for p in run.iterdir()} == {"config.json", "last.pt"}
    resume = "`drillbook train --config run/config.json --out run --resume`"
    line = refused(drillbook("finetune", "run", cwd=tmp_path),
                   "run has not finished an epoch (it has no best.pt)", resume)
    assert advice_flags(line) <= options("finetune")
    for command in ("eval", "rank"):
        line = refused(drillbook(command, "run", cwd=tmp_path), "no best.pt yet", resume,
                       "--which last")
        assert advice_flags(line) <= options(command)
    done = drillbook("rank", "run", "--which", "last", "--max-tokens", "50", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    # the advice works; a stop by --max-epochs (which counts the run's epochs) says how on
    done = drillbook(*resume.strip("`").split()[1:], "--set", "train.epochs=2",
                     "--max-epochs", "1", "--quiet", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert b"stopped (epochs) after 1 epoch(s)" in done.stdout
    assert b"continue with --resume and a larger --max-epochs (or none)" in done.stdout


@needs_multi30k
def test_translate_of_a_run_without_a_finished_epoch_advises_what_translate_takes(tmp_path,
                                                                                 nmt_run):
    run = copy_run(nmt_run, tmp_path)
    (run / "best.pt").unlink()
    line = refused(drillbook("translate", "run", cwd=tmp_path, stdin=b"ein hund .\n"),
                   "no best.pt yet", "--which last")
    assert advice_flags(line) <= options("translate")
    done = drillbook("translate", "run", "--which", "last", cwd=tmp_path,
                     stdin=b"ein hund .\n")
    assert done.returncode == 0 and done.stdout.count(b"\n") == 1


# ------------------------------------------------------------------ 5. translate keeps lines
@pytest.mark.slow
@needs_multi30k
def test_translate_prints_one_line_per_input_line(tmp_path, nmt_run):
    # inside the lines: a line separator, a form feed, a file separator, a next-line
    # character and Windows line ends; at the start, a byte-order mark
    lines = ["ein hund\u2028läuft .", "zwei männer\x0c gehen .", "ein\x1c mann\x85 ."]
    text = "\ufeff" + "\r\n".join(lines) + "\r\n"
    (tmp_path / "in.txt").write_text(text, encoding="utf-8")
    for how in (["--input", "in.txt"], ["--input", "in.txt", "--raw"]):
        done = drillbook("translate", nmt_run, *how, cwd=tmp_path)
        assert done.returncode == 0, done.stderr
        assert done.stdout.decode().count("\n") == len(lines)
    piped = drillbook("translate", nmt_run, cwd=tmp_path, stdin=text.encode())
    assert piped.stdout == drillbook("translate", nmt_run, "--input", "in.txt",
                                     cwd=tmp_path).stdout
    # the byte-order mark is not a word: the first line translates as without it
    plain = drillbook("translate", nmt_run, cwd=tmp_path, stdin=b"ein hund .\n")
    marked = drillbook("translate", nmt_run, cwd=tmp_path,
                       stdin="\ufeffein hund .\n".encode())
    assert plain.returncode == marked.returncode == 0 and plain.stdout == marked.stdout


@needs_multi30k
def test_translate_input_that_is_a_folder(tmp_path, nmt_run):
    (tmp_path / "sentences").mkdir()
    refused(drillbook("translate", nmt_run, "--input", "sentences", cwd=tmp_path),
            "--input sentences: a folder")


# ------------------------------------------------------------------ 6. a fresh machine
def test_the_readme_shows_the_cpu_install_and_the_figures_extra():
    readme = (ROOT / "README.md").read_text()
    assert "--index-url https://download.pytorch.org/whl/cpu" in readme
    assert 'drillbook[nmt,yaml,notebooks]' in readme and "--figures" in readme


def test_figures_without_matplotlib_fail_before_the_report(tmp_path):
    shutil.copytree(BOOK_RESULTS / "tutorial", tmp_path / "results" / "tutorial")
    script = ("import sys; sys.modules['matplotlib'] = None\n"
              "from drillbook.cli import main\n"
              "sys.exit(main(sys.argv[1:]))")
    done = subprocess.run([sys.executable, "-c", script, "report", "--results", "results",
                           "--out", "report.md", "--figures", "figures"], cwd=tmp_path,
                          capture_output=True)
    refused(done, "--figures draws with matplotlib", "drillbook[notebooks]")
    assert not (tmp_path / "report.md").exists() and not (tmp_path / "figures").exists()


def test_importing_or_asking_for_help_imports_no_benchmark_timer():
    """torch.utils.benchmark looks for a CUDA toolkit when imported and, on a machine that
    has one and no GPU, prints "No CUDA runtime is found": only a benchmark imports it.
    One process, asked after each step."""
    script = """
import sys

def imported():
    return 'torch.utils.benchmark' in sys.modules

import drillbook
print(imported())
import drillbook.cli, drillbook.experiments, drillbook.notebook, drillbook.train
print(imported())
from drillbook.cli import main
for argv in (['--help'], ['reproduce', '--help'], ['bench', 'heads', '--help']):
    try:
        main(argv)
    except SystemExit:
        pass
    print(imported(), file=sys.stderr)
"""
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, timeout=300)
    assert done.returncode == 0, done.stderr
    assert done.stdout.decode().splitlines()[:2] == ["False", "False"]
    assert done.stderr.decode().splitlines() == ["False"] * 3


def first_line_of(argv: list[str], cwd: Path, seconds: float = 300) -> str:
    """The first line ``drillbook ARGV`` prints on standard error; the process is then
    stopped (what it would go on to do is the long work the line announces)."""
    environ = {**os.environ, "TQDM_DISABLE": "1"}
    proc = subprocess.Popen([sys.executable, "-m", "drillbook.cli", *map(str, argv)],
                            cwd=cwd, env=environ, stdout=subprocess.DEVNULL,
                            stderr=subprocess.PIPE, start_new_session=True)
    start = time.monotonic()
    try:
        line = proc.stderr.readline().decode()
        assert time.monotonic() - start < seconds
        return line
    finally:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()


def test_rank_over_a_whole_split_says_what_it_will_cost(tmp_path, lm_run):
    line = first_line_of(["rank", lm_run, "--split", "train"], tmp_path)
    assert re.match(r"drillbook: the rank on cpu will take about [\d.]+ (min|h|days) "
                    r"\(929,584 x 10,000 log-probabilities, a 10,000 x 10,000 Gram matrix", line)
    assert "--max-tokens N reads fewer" in line


@pytest.mark.slow
def test_dynamic_evaluation_with_a_search_says_what_it_will_cost(tmp_path, lm_run):
    run = copy_run(lm_run, tmp_path)
    line = first_line_of(["eval", run, "--dynamic", "--dyn-search"], tmp_path)
    assert re.match(r"drillbook: dynamic evaluation on cpu will take about [\d.]+ (min|h|days)",
                    line)
    assert "24 pairs x 14,752 validation segments of the search" in line
    assert "--dyn-search-tokens N and --dyn-grad-batches N do less" in line


@pytest.mark.slow
@needs_data
def test_a_paper_size_training_on_a_cpu_says_what_it_will_cost(tmp_path):
    line = first_line_of(["train", "ptb/awd-lstm", "--device", "cpu", "--out", "run"],
                         tmp_path)
    assert re.match(r"drillbook: training ptb/awd-lstm on the CPU will take about [\d.]+ days "
                    r"\([\d.]+ (min|h) per epoch x 500 epoch\(s\): 682 steps of [\d.]+ s", line)
    assert "--max-minutes stops it, --resume continues it" in line


def test_weights_that_do_not_fit_in_every_way_are_named():
    """The parts of torch's message the one line keeps: a size, weights the model lacks,
    weights the checkpoint lacks."""
    from itertools import pairwise

    import torch

    from drillbook.errors import CheckpointError
    from drillbook.train.checkpoint import load_weights

    def net(*widths):
        return torch.nn.Sequential(*[torch.nn.Linear(a, b) for a, b in pairwise(widths)])

    cases = [(net(3, 4, 2), net(3, 5, 2), "0.weight is [4, 3] in the checkpoint and [5, 3] in "
                                          "the config's model (and 2 more)"),
             (net(3, 4, 2), net(3, 4), "the checkpoint has 2 weight(s) the config's model "
                                       "lacks (1.weight, ...)"),
             (net(3, 4), net(3, 4, 2), "the config's model has 2 weight(s) the checkpoint "
                                       "lacks (1.weight, ...)")]
    for saved, built, words in cases:
        with pytest.raises(CheckpointError) as err:
            load_weights(built, saved.state_dict(), checkpoint="r/best.pt",
                         config="r/config.json")
        assert str(err.value).startswith("r/best.pt does not fit the model r/config.json "
                                         "describes: ") and words in str(err.value)
        assert "\n" not in str(err.value)


def test_estimates_in_words():
    from drillbook.cli.estimates import duration

    assert [duration(s) for s in (45, 600, 3 * 3600, 40 * 86400)] == [
        "45 s", "10 min", "3.0 h", "40 days"]
