"""Re-exports for tests/integration/roles/test_ingest_overlap.py, which still imports the
pipeline harness from here; the harness lives in tests/support/pipeline.py and its fixture in
tests/conftest.py. Remove this file once that test imports tests.support.pipeline."""

from __future__ import annotations

from tests.support.pipeline import Pipeline, PipelineFactory

__all__ = ["Pipeline", "PipelineFactory"]
