"""A repair fuzzer: random agent programs recorded as a desk, flagged, repaired, and compared with an
independent reference interpreter's clean run.

- `programs`: desks as plain JSON (sources, which are flagged, roots) and a hypothesis strategy that
  generates them; a desk file replays a counterexample exactly.
- `reference`: a small interpreter that runs a desk with and without the flagged sources. It imports
  nothing of kintsugi: it is the second opinion the repair is checked against.
- `harness`: records a desk through kintsugi's recorder, flags and repairs it in this process, reads
  the repaired state and compares it with the reference.
"""
