"""The code location: ``dagster dev -w workspace.yaml`` or ``dagster ... -m situate.pipelines.definitions``."""

from __future__ import annotations

import dagster as dg

from situate.assets.retrieval_eval import retrieval_eval
from situate.pipelines.automation import NIGHTLY
from situate.pipelines.component import SituateCollection
from situate.pipelines.settings import check_environment
from situate.resources.models import registry as models

models.use_offline_tiktoken()


def build_definitions(docs_path: str | None = None, home: str | None = None, plain: bool = False) -> dg.Definitions:
    """situate's own code location: one instance of the component
    (:class:`situate.pipelines.component.SituateCollection`, the one code path of every collection)
    with the empty name, so the unprefixed names (``blurbs``, ``ingest``), over a docs folder and
    data folder (defaults from the settings); and the ``retrieval_eval`` asset; the in-process
    executor, so a ``dagster asset materialize`` loads each model once.

    Raises
    ------
    situate.pipelines.preflight.StartupError
        A setting outside its bound (:func:`situate.pipelines.settings.check_environment`): the
        code location refuses to load, so ``dagster … -m situate.pipelines.definitions`` and ``situate dev``
        start no run with it (a run's own resources check again at its start).
    """
    own = SituateCollection(name="", docs=docs_path or "", home=home or "", cron=NIGHTLY, fresh_within_h=None)
    collection = own.definitions(check_environment(), plain=plain)
    return dg.Definitions.merge(collection, dg.Definitions(assets=[retrieval_eval], executor=dg.in_process_executor))


defs = build_definitions()
