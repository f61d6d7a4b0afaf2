"""An interrupted ``perfmodel sweep -o FILE`` resumes from the chunks it kept in ``FILE.parts/``
(``perfmodel.chunkstore``): the rerun computes only the missing chunks and writes the table of an
uninterrupted run, to the last bit, in this process or on a 2-worker Dask cluster; chunks of another
sweep (other arguments, another spec content) are refused with exit 2."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

import perfmodel.fanout
from perfmodel.chunkstore import Parts
from perfmodel.cli import main
from perfmodel.hardware.loader import forget_spec_files

GRID = ["--grid", "batch=1,4,16", "--grid", "seq=1,64,512,2048", "--grid", "memory.hbm.bandwidth=2TB/s,4TB/s"]
CHUNK = 3  # 24 points: 8 chunks
CHUNKS = 8
REPO = Path(__file__).resolve().parents[1]


def _words(output: Path, *extra: str, on: str = "h100-sxm", grid: list[str] = GRID) -> list[str]:
    return ["sweep", "--on", on, *grid, "--chunk-points", str(CHUNK), "-o", str(output), *extra]


def _parts(output: Path) -> Path:
    return output.with_name(output.name + ".parts")


def _kept(output: Path) -> list[str]:
    return sorted(path.name for path in _parts(output).glob("chunk-*.npz"))


@contextlib.contextmanager
def _recording(monkeypatch, *, stop_after: int | None = None):
    """Records the chunks the sweep sends to be computed (their spans, wherever the mapper runs them) and
    those it keeps; with ``stop_after``, Ctrl-C arrives right after that many chunks were kept."""
    sent: list[tuple[int, int]] = []
    saved: list[int] = []
    real_mapper, real_save = perfmodel.fanout.mapper, Parts.save

    @contextlib.contextmanager
    def recording_mapper(**kwargs):
        with real_mapper(**kwargs) as inner:
            def run(function, items):
                items = list(items)
                sent.extend(items)
                return inner(function, items)

            yield run

    def save(self, index, columns):
        real_save(self, index, columns)
        saved.append(index)
        if stop_after is not None and len(saved) == stop_after:
            raise KeyboardInterrupt

    monkeypatch.setattr(perfmodel.fanout, "mapper", recording_mapper)
    monkeypatch.setattr(Parts, "save", save)
    yield sent, saved
    monkeypatch.undo()


@pytest.mark.parametrize(("name", "where"), [("table.parquet", []), ("table.csv", ["--workers", "2"])])
def test_an_interrupted_sweep_resumes_with_only_the_missing_chunks(tmp_path, capsys, monkeypatch, name, where):
    reference = tmp_path / f"reference{Path(name).suffix}"
    assert main(_words(reference)) == 0
    assert not _parts(reference).exists()  # a finished run leaves no parts directory
    output = tmp_path / name
    with _recording(monkeypatch, stop_after=3) as (sent, saved):
        assert main(_words(output, *where)) == 130
    assert saved == [0, 1, 2] and not output.exists()
    assert _kept(output) == [f"chunk-{index:08d}.npz" for index in range(3)]
    assert f"3 of {CHUNKS} chunks of this sweep are kept in {_parts(output)}" in capsys.readouterr().err
    with _recording(monkeypatch) as (sent, saved):
        assert main(_words(output, *where)) == 0
    spans = [(start, min(start + CHUNK, 24)) for start in range(0, 24, CHUNK)]
    assert sent == spans[3:]  # only the missing chunks were computed
    assert saved == list(range(3, CHUNKS))
    assert f"resuming: 3 of {CHUNKS} chunks" in capsys.readouterr().err
    assert output.read_bytes() == reference.read_bytes()
    assert not _parts(output).exists()


def test_a_killed_sweep_resumes_to_the_same_bytes(tmp_path, capsys):
    """The process is killed outright (SIGKILL: no handler, no finally) after its fourth chunk."""
    reference = tmp_path / "reference.parquet"
    assert main(_words(reference)) == 0
    output = tmp_path / "table.parquet"
    child = ("import os, signal, sys\n"
             "from perfmodel.chunkstore import Parts\n"
             "from perfmodel.cli import main\n"
             "real, kept = Parts.save, []\n"
             "def save(self, index, columns):\n"
             "    real(self, index, columns)\n"
             "    kept.append(index)\n"
             "    if len(kept) == 4:\n"
             "        os.kill(os.getpid(), signal.SIGKILL)\n"
             "Parts.save = save\n"
             "sys.exit(main(sys.argv[1:]))\n")
    environment = {**os.environ, "PYTHONPATH": os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")])}
    run = subprocess.run([sys.executable, "-c", child, *_words(output)], cwd=tmp_path, env=environment,
                         capture_output=True, text=True, timeout=300)
    assert run.returncode == -signal.SIGKILL, run.stderr
    assert not output.exists() and len(_kept(output)) == 4
    (_parts(output) / ".chunk-00000004.npz.12345.tmp").write_bytes(b"half a chunk")  # as a kill mid-write leaves
    assert main(_words(output)) == 0
    assert f"resuming: 4 of {CHUNKS} chunks" in capsys.readouterr().err
    assert output.read_bytes() == reference.read_bytes()
    assert not _parts(output).exists()


def _interrupted(monkeypatch, words: list[str]) -> None:
    with _recording(monkeypatch, stop_after=2):
        assert main(words) == 130


def test_chunks_of_another_sweep_are_refused_with_exit_2(tmp_path, capsys, monkeypatch):
    output = tmp_path / "table.parquet"
    _interrupted(monkeypatch, _words(output))
    kept = _kept(output)
    capsys.readouterr()
    other = ["--grid", "batch=1,4", "--grid", "seq=1,64,512,2048", "--grid", "memory.hbm.bandwidth=2TB/s,4TB/s"]
    assert main(_words(output, grid=other)) == 2
    error = capsys.readouterr().err
    assert error.startswith(f"perfmodel: error: {_parts(output)} holds the finished chunks of another run")
    assert "grid batch: [1, 4, 16] there, [1, 4] here" in error  # what differs, there and here
    assert error.count(" there, ") == 2 and "points: 24 there, 16 here" in error  # and nothing else
    assert f"rm -r {_parts(output)}" in error and "--restart" in error
    assert "Traceback" not in error and not output.exists() and _kept(output) == kept  # nothing touched
    # the same values written otherwise are the same sweep: 4000GB/s is 4TB/s
    same = ["--grid", "batch=1,4,16", "--grid", "seq=1,64,512,2048", "--grid", "memory.hbm.bandwidth=2TB/s,4000GB/s"]
    assert main(_words(output, grid=same)) == 0
    assert "resuming: 2 of" in capsys.readouterr().err
    # --restart discards the other run's chunks and computes the new sweep whole
    _interrupted(monkeypatch, _words(output))
    reference = tmp_path / "reference.parquet"
    assert main(_words(reference, grid=other)) == 0
    assert main(_words(output, "--restart", grid=other)) == 0
    assert output.read_bytes() == reference.read_bytes() and not _parts(output).exists()


def test_a_spec_edited_since_the_interruption_is_refused(tmp_path, capsys, monkeypatch):
    spec = tmp_path / "device.yaml"
    spec.write_text((REPO / "hardware_specs/gpu/h100-sxm.yaml").read_text(encoding="utf-8"), encoding="utf-8")
    output = tmp_path / "table.parquet"
    grid = ["--grid", "batch=1,4,16", "--grid", "seq=1,64,512,2048"]
    _interrupted(monkeypatch, _words(output, on=str(spec), grid=grid))
    text = spec.read_text(encoding="utf-8")
    assert "bandwidth: 3.35 TB/s" in text  # HBM
    spec.write_text(text.replace("bandwidth: 3.35 TB/s", "bandwidth: 3.2 TB/s", 1), encoding="utf-8")
    forget_spec_files()  # as a new process would (this one keeps each spec file it has read)
    capsys.readouterr()
    assert main(_words(output, on=str(spec), grid=grid)) == 2
    error = capsys.readouterr().err
    assert "spec content (sha256): " in error and error.count(" there, ") == 1  # that field alone differs
    assert len(_kept(output)) == 2


def test_restart_needs_an_output(capsys):
    assert main(["sweep", "--on", "h100-sxm", "--grid", "batch=1,2", "--restart"]) == 2
    assert "--restart discards the chunks" in capsys.readouterr().err


def test_an_unreadable_kept_chunk_is_a_clear_error(tmp_path, capsys, monkeypatch):
    output = tmp_path / "table.parquet"
    _interrupted(monkeypatch, _words(output))
    broken = _parts(output) / "chunk-00000001.npz"
    broken.write_bytes(b"not a chunk")
    capsys.readouterr()
    assert main(_words(output)) == 2
    error = capsys.readouterr().err
    assert f"{broken}: cannot read this kept chunk" in error and "delete the file" in error
    assert "Traceback" not in error and not output.exists()
    broken.unlink()  # as the message says: that chunk is computed again
    assert main(_words(output)) == 0 and not _parts(output).exists()
