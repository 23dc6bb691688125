"""Static buffer planning for ``torch.distributed.pipelining`` schedules: ``plan.py`` is the front
(everything a user or a test imports), ``ir.py`` the action IR and lowering, ``sim.py`` the timing
replay, ``buffers.py`` lifetimes and slots, ``placement.py`` the moves of receives, waits and
UNSHARDs, ``search.py`` the plan search, ``timed_bound.py`` its lower bound, ``runtime.py`` the hook
that makes a real schedule run the plan, ``trace.py`` its traces."""
