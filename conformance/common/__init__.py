"""What the DynamoDB and the SQS conformance harnesses share.

Both ``run.py`` scripts put ``conformance/`` on ``sys.path`` and import this package beside
their own ``harness``. Only what works the same way for both suites lives here; each suite's
requests, normalisation and verdict stay in its ``harness``.

- ``bootstrap``: re-executes ``run.py`` under the shared venv when boto3 is missing.
- ``corpus``: the case-file reading both corpora share (files, ``CorpusError``, macros).
- ``wire``: the boto3 session, client settings and raw calls; base64 blobs both ways.
- ``outcome``: the compared value of a step (``Outcome``) and where two of them differ.
- ``known``: reads ``known-differences.md``.
- ``report``: case selection, the reachability check, parallel runs and printed outcomes.
"""
