"""Differential conformance harness for Postbox's DynamoDB-compatible item store.

The harness runs the same corpus of DynamoDB requests against a reference endpoint
(DynamoDB Local) and a target endpoint (``postbox serve``) with one unmodified boto3 client,
normalises both outcomes and reports every difference. Modules, in the order a case flows
through them:

- ``corpus``: loads case files and expands their macros into plain requests.
- ``wire``: turns case-file requests into boto3 parameters (table names, base64 binaries).
- ``endpoint``: one DynamoDB + DynamoDB Streams client pair and the calls a case makes.
- ``outcome``: normalises a response or an error into the value that is compared.
- ``known``: reads ``known-differences.md``.
- ``runner``: runs cases on both endpoints and collects mismatches.
"""
