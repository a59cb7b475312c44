"""Oracle models: targets and speculative partners whose acceptance is known by construction.

Random weights give acceptance about 1.1, so every speculative method loses to no
speculation and a sweep's "none" is trivially right. An oracle target keeps the real
decode cost (every layer reads all its weights and writes its KV) but its output is a
known function, so a partner can be built to match it exactly (acceptance 1.0), or
noisily to a calibrated first-position acceptance. docs/speculative.md ("Oracle models")
says what they prove and what not.

- :mod:`~specops_lab.oracle.spec`: families, shapes, the spec and the permutation
  (standard library only: the controller reads it);
- :mod:`~specops_lab.oracle.builder` (torch): builds a folder, checked by
  :mod:`~specops_lab.oracle.selfcheck`; ``python -m specops_lab.oracle`` runs them;
- :mod:`~specops_lab.oracle.lab`: the lab's cached builds (``specops lab oracle``).
"""
