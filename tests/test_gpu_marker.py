"""The ``gpu`` marker: tests/conftest.py skips marked tests where torch (or, with ``warp=True``, Warp) sees no
CUDA device, and runs them where it does."""

from pathlib import Path

import pytest
import torch

pytest_plugins = ["pytester"]

MARKED = """
import pytest

@pytest.mark.gpu
def test_on_gpu():
    pass

def test_on_cpu():
    pass
"""


@pytest.fixture
def marked_suite(pytester: pytest.Pytester) -> pytest.Pytester:
    pytester.makeconftest((Path(__file__).parent / "conftest.py").read_text())
    pytester.makeini("[pytest]\nmarkers =\n    gpu: needs a CUDA device\n")
    pytester.makepyfile(test_marked=MARKED)
    return pytester


def test_gpu_tests_are_skipped_without_cuda(marked_suite, monkeypatch) -> None:
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    result = marked_suite.runpytest_inprocess("-rs")
    result.assert_outcomes(passed=1, skipped=1)
    result.stdout.fnmatch_lines(["*needs a CUDA device (torch.cuda.is_available() is False)*"])


def test_gpu_tests_run_with_cuda(marked_suite, monkeypatch) -> None:
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    marked_suite.runpytest_inprocess().assert_outcomes(passed=2)
