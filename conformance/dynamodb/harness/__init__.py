"""Differential conformance harness for Postbox's DynamoDB-compatible item store.

The harness runs the same corpus of DynamoDB requests against a reference endpoint
(DynamoDB Local) and a target endpoint (``postbox serve``) with one unmodified boto3 client,
normalises both outcomes and reports every difference. Modules, in the order a case flows
through them:

- ``corpus``: loads case files and expands their macros into plain requests.
- ``wire``: logical table names in case files to the physical names of a run, and back.
- ``endpoint``: one DynamoDB + DynamoDB Streams client pair and the calls a case makes.
- ``outcome``: normalises a response or an error into the value that is compared.
- ``runner``: runs cases on both endpoints and collects mismatches.

What it shares with the SQS harness is in ``conformance/common``: reading case files and
``known-differences.md``, the boto3 clients and base64 blobs, ``Outcome``, and run.py's
case selection and printing.
"""
