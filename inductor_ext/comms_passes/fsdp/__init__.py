"""SimpleFSDP-style data parallelism for compiled graphs: ``data_parallel.py`` (the front end that
puts parameter all-gathers and gradient reduce-scatters into the graph) and the ``fsdp_overlap``
pass (``overlap.py``, built from ``settings.py``, ``bucketing.py`` and ``scheduling.py``), which
buckets those collectives and schedules them under compute."""
