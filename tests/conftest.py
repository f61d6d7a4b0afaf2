import os

import pytest

os.environ.setdefault("MPLBACKEND", "Agg")


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    """A skipped test proves nothing: the test command installs everything the suite needs
    (".[dev,torch]"), so a skip means a missing dependency or a missing file, and it fails."""
    outcome = yield
    report = outcome.get_result()
    if report.skipped and not hasattr(report, "wasxfail"):
        report.outcome = "failed"
        report.longrepr = f"skipped, which the suite does not allow: {report.longrepr}"


@pytest.fixture(scope="session")
def notebook_runs(tmp_path_factory):
    """Each lab notebook executed once for the whole session (``tests/notebook_runs.py``)."""
    from tests.notebook_runs import NotebookRuns

    return NotebookRuns(tmp_path_factory)


SMALL_LLAMA_SOURCE = '''
import torch, transformers
def small_llama():
    config = transformers.LlamaConfig(hidden_size=128, intermediate_size=256, num_hidden_layers=2,
                                      num_attention_heads=4, num_key_value_heads=4, vocab_size=500)
    with torch.device("meta"):
        return transformers.LlamaForCausalLM(config)
'''


@pytest.fixture
def small_llama_factory(tmp_path):
    """A models.py whose ``small_llama`` builds a 2-layer Llama on the meta device: ``FILE.py:small_llama``."""
    source = tmp_path / "models.py"
    source.write_text(SMALL_LLAMA_SOURCE)
    return f"{source}:small_llama"
