"""Deploys a CloudFormation template to a CloudFormation endpoint (MiniStack's
in the tests) and waits for the outcome.

    python scripts/lib/cfn_deploy.py ENDPOINT STACK TEMPLATE [Key=Value ...]

Prints the stack's outputs as one JSON object and exits 0 on CREATE_COMPLETE;
otherwise prints the status, its reason and every failed resource's reason to
stderr and exits 1.
"""

import json
import sys
import time

import boto3


def main():
    endpoint, stack, template = sys.argv[1:4]
    params = [
        {"ParameterKey": k, "ParameterValue": v}
        for k, v in (p.split("=", 1) for p in sys.argv[4:])
    ]
    cf = boto3.client(
        "cloudformation",
        endpoint_url=endpoint,
        region_name="us-east-1",
        aws_access_key_id="local",
        aws_secret_access_key="local",
    )
    with open(template) as f:
        body = f.read()
    cf.create_stack(
        StackName=stack,
        TemplateBody=body,
        Parameters=params,
        Capabilities=["CAPABILITY_IAM", "CAPABILITY_NAMED_IAM"],
    )
    deadline = time.time() + 120
    while True:
        s = cf.describe_stacks(StackName=stack)["Stacks"][0]
        if not s["StackStatus"].endswith("IN_PROGRESS") or time.time() > deadline:
            break
        time.sleep(0.5)
    if s["StackStatus"] != "CREATE_COMPLETE":
        print(f"{stack}: {s['StackStatus']} {s.get('StackStatusReason', '')}", file=sys.stderr)
        for e in cf.describe_stack_events(StackName=stack)["StackEvents"]:
            if "FAILED" in e["ResourceStatus"]:
                print(
                    f"  {e['LogicalResourceId']}: {e.get('ResourceStatusReason', '')}",
                    file=sys.stderr,
                )
        sys.exit(1)
    print(json.dumps({o["OutputKey"]: o["OutputValue"] for o in s.get("Outputs", [])}))


main()
