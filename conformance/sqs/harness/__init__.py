"""Differential conformance harness for Postbox's SQS-compatible queues.

The harness runs one corpus of SQS requests against a reference endpoint (an SQS-compatible
server such as MiniStack) and a target endpoint (``postbox serve``) with one unmodified boto3
SQS client speaking the JSON protocol, normalises both outcomes and reports every difference.
Steps may also carry what the AWS documentation says should happen (``expect``); a listed
known difference is accepted only where the target does what the documentation says.
Modules, in the order a case flows through them:

- ``corpus``: loads case files, expands macros, checks the case format.
- ``endpoint``: one boto3 SQS client per endpoint, and the test-clock hook.
- ``side``: runs one case on one endpoint: queues, references between steps, pseudo-steps.
- ``normalise``: turns a response or an error into the value that is compared.
- ``expect``: matches an outcome against a case's documented expectation.
- ``runner``: runs cases on both endpoints concurrently and collects mismatches.

What it shares with the DynamoDB harness is in ``conformance/common``: reading case files and
``known-differences.md``, the boto3 client and base64 blobs (``wire``), ``Outcome``, and
run.py's case selection and printing.
"""
