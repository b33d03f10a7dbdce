"""Retrieval evaluation with no Dagster in it: the cookbook's Pass@k and failure@k
(:mod:`situate.evaluation.metrics`) and the fusion fitted by cross-validation inside the dev half
(:mod:`situate.evaluation.fusion_fit`).  ``situate eval`` (``situate.pipelines.evaluate``) wires them."""
