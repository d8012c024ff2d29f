#!/usr/bin/env python3
"""A reference agent loop for Rodon Compute, in the Python standard library.

It drives an agent run through the gateway's tool API as a model would:

1. POST /v1/runs {"workspace", "agent"} with an API key (RODON_KEY) makes
   the run and returns its grant (rg_...), shown once.
2. Each tool call the "model" makes is POST /v1/runs/{id}/steps
   {"tool", "input"} with the grant (Bash with ?wait=60s). The answer is
   printed as the model would read it, refusals included (message and
   did_you_mean).
3. A gated ApplyChange pauses the run awaiting_approval: the loop polls
   GET /v1/runs/{id} with the grant and prints the run page's URL, where
   a person approves or rejects; once approved it makes the same call
   again (the one step that may apply it).
4. POST /v1/runs/{id}/finish ends the run. The exit code is 0 when the
   run succeeded, 1 when it failed (or was cancelled), 2 when it could not
   be made or driven at all.

The model here is scripted (ScriptedModel, a JSON file of tool calls), so
the loop runs without one; see README.md for where a real model's
tool-use loop plugs in (Model.next), with TOOLS as its tool list.

Environment: RODON_GATEWAY (the gateway's base URL, such as
https://rodon.example.com), RODON_KEY (an API key, rk_..., editor or more
on the workspace), RODON_CA (optional: a CA file for an HTTPS gateway whose
certificate the system does not trust).
"""

import argparse
import json
import os
import ssl
import sys
import time
import urllib.error
import urllib.parse
import urllib.request

# The tools, as a model is given them: name, description and the JSON
# schema of the input, exactly the inputs of api/agent.go (ReadInput,
# WriteInput, ...). agent_test.go checks them against the Go types.
TOOLS = [
    {
        "name": "Read",
        "description": "Read a file of the workspace (/workspace/... or relative) or the library (/library/...). "
        "Lines come numbered as cat -n numbers them.",
        "input_schema": {
            "type": "object",
            "properties": {
                "path": {"type": "string", "description": "the file's path"},
                "offset": {"type": "integer", "description": "the first line to read, 1-based"},
                "limit": {"type": "integer", "description": "how many lines (default 2000)"},
            },
            "required": ["path"],
            "additionalProperties": False,
        },
    },
    {
        "name": "Glob",
        "description": "List the paths that match a glob pattern (such as **/*.csv), sorted.",
        "input_schema": {
            "type": "object",
            "properties": {
                "pattern": {"type": "string", "description": "the glob pattern"},
                "path": {"type": "string", "description": "the directory to search (default: the workspace)"},
            },
            "required": ["pattern"],
            "additionalProperties": False,
        },
    },
    {
        "name": "Grep",
        "description": "Search file contents with an RE2 regular expression; matches come as path, line and text.",
        "input_schema": {
            "type": "object",
            "properties": {
                "pattern": {"type": "string", "description": "an RE2 regular expression"},
                "path": {"type": "string", "description": "a file or directory to search (default: the workspace)"},
                "glob": {"type": "string", "description": "only files whose path matches this glob"},
                "ignore_case": {"type": "boolean", "description": "match without regard to case"},
            },
            "required": ["pattern"],
            "additionalProperties": False,
        },
    },
    {
        "name": "Write",
        "description": "Write a file of the workspace (created or replaced): one revision.",
        "input_schema": {
            "type": "object",
            "properties": {
                "path": {"type": "string", "description": "the file's path"},
                "content": {"type": "string", "description": "the whole new content"},
            },
            "required": ["path", "content"],
            "additionalProperties": False,
        },
    },
    {
        "name": "Edit",
        "description": "Replace old_string by new_string in a file of the workspace: one revision. "
        "old_string must occur exactly once unless replace_all is set.",
        "input_schema": {
            "type": "object",
            "properties": {
                "path": {"type": "string", "description": "the file's path"},
                "old_string": {"type": "string", "description": "the text to replace"},
                "new_string": {"type": "string", "description": "the text to put in its place"},
                "replace_all": {"type": "boolean", "description": "replace every occurrence"},
            },
            "required": ["path", "old_string", "new_string"],
            "additionalProperties": False,
        },
    },
    {
        "name": "Bash",
        "description": "Run a shell command in a fresh sandbox that sees the workspace at /workspace "
        "(read-only when the agent has no writing tool) and the library at /library.",
        "input_schema": {
            "type": "object",
            "properties": {
                "command": {"type": "string", "description": "the command, run by /bin/sh -c"},
                "timeout": {"type": "string", "description": "a duration such as 30s, at most the agent's limit"},
            },
            "required": ["command"],
            "additionalProperties": False,
        },
    },
    {
        "name": "ProposeChange",
        "description": "Propose a change (files, or a unified diff against the head) without making it; "
        "the answer is the proposal's id and its diff.",
        "input_schema": {
            "type": "object",
            "properties": {
                "files": {
                    "type": "array",
                    "description": "the files to change: their new content, or delete",
                    "items": {
                        "type": "object",
                        "properties": {
                            "path": {"type": "string"},
                            "content": {"type": "string"},
                            "delete": {"type": "boolean"},
                        },
                        "required": ["path"],
                        "additionalProperties": False,
                    },
                },
                "patch": {"type": "string", "description": "a unified diff (git's format), instead of files"},
                "message": {"type": "string", "description": "what the change is for"},
            },
            "additionalProperties": False,
        },
    },
    {
        "name": "ApplyChange",
        "description": "Apply exactly a proposal ProposeChange made. A gated agent waits here for a person's approval.",
        "input_schema": {
            "type": "object",
            "properties": {
                "proposal": {"type": "string", "description": "the proposal's id (prop-...)"},
            },
            "required": ["proposal"],
            "additionalProperties": False,
        },
    },
]

# Step states after which a Bash step runs no more.
LIVE_STEP_STATES = {"pending", "queued", "placed", "starting", "running"}


class GatewayError(Exception):
    """An answer the loop cannot go on from."""


class Gateway:
    """The gateway's HTTP API: JSON in, JSON out."""

    def __init__(self, base, ca_file=None):
        self.base = base.rstrip("/")
        self.context = None
        if self.base.startswith("https://"):
            self.context = ssl.create_default_context(cafile=ca_file or None)

    def call(self, method, path, token, body=None, timeout=120):
        """Sends one request; returns (status, decoded JSON body or None)."""
        data = None if body is None else json.dumps(body).encode()
        req = urllib.request.Request(self.base + path, data=data, method=method)
        req.add_header("Authorization", "Bearer " + token)
        req.add_header("Accept", "application/json")
        if data is not None:
            req.add_header("Content-Type", "application/json")
        try:
            with urllib.request.urlopen(req, timeout=timeout, context=self.context) as resp:
                return resp.status, _decode(resp.read())
        except urllib.error.HTTPError as e:
            return e.code, _decode(e.read())
        except urllib.error.URLError as e:
            raise GatewayError(f"{method} {path}: {e.reason}") from e

    def run_page(self, run_id):
        """The run page's URL, where a person sees the run and approves."""
        return f"{self.base}/#/runs/{urllib.parse.quote(run_id)}"


def _decode(b):
    if not b:
        return None
    try:
        return json.loads(b)
    except ValueError:
        return {"error": {"code": "not_json", "message": b.decode(errors="replace")[:500]}}


def error_of(body):
    """The error object of an error answer ({"error": {...}})."""
    if isinstance(body, dict) and isinstance(body.get("error"), dict):
        return body["error"]
    return {"code": "unknown", "message": json.dumps(body)}


class Model:
    """What the loop asks for its next tool call.

    A real model plugs in here: next() sends the conversation so far (the
    agent file's instructions, the task, and each observation as a
    tool_result) with TOOLS as its tool list, and returns the tool_use the
    model answers with as {"tool": NAME, "input": {...}}, or None when the
    model answers without a tool call (it is done). The observation is
    None before the first call, then (text, is_error): what the last call
    answered, as the model reads it. finish() says how the run ends: {}
    (succeeded) or {"failed": True, "reason": "..."}.
    """

    def next(self, observation):
        raise NotImplementedError

    def finish(self):
        return {}


class ScriptedModel(Model):
    """A model that replays tool calls from a JSON file, whatever it sees.

    The file is a list of {"tool", "input"} objects, or an object
    {"calls": [...], "finish": {"failed"?, "reason"?}}.
    """

    def __init__(self, path):
        with open(path, encoding="utf-8") as f:
            script = json.load(f)
        if isinstance(script, list):
            script = {"calls": script}
        self.calls = list(script.get("calls", []))
        self._finish = script.get("finish", {})
        for i, c in enumerate(self.calls):
            if not isinstance(c, dict) or not isinstance(c.get("tool"), str):
                raise ValueError(f"{path}: call {i}: want {{\"tool\": NAME, \"input\": {{...}}}}")

    def next(self, observation):
        return self.calls.pop(0) if self.calls else None

    def finish(self):
        return self._finish


def observe(call, status, body):
    """What the model reads of a tool call's answer: (text, is_error)."""
    if status in (200, 202):
        result = (body or {}).get("result") or {}
        if result.get("error"):
            return f"error: {result['error']}", True
        tool = call["tool"]
        if tool == "Read":
            more = " (more lines follow: read on with offset)" if result.get("truncated") else ""
            return f"{result.get('path')} ({result.get('lines')} lines){more}\n{result.get('content', '')}", False
        if tool == "Bash":
            head = f"exit code {result['exit_code']}" if result.get("exit_code") is not None else f"state {result.get('state')}"
            cut = " (output truncated: its last 32 KiB)" if result.get("truncated") else ""
            return f"{head}{cut}\n{result.get('output', '')}", False
        return json.dumps(result, indent=2), False
    err = error_of(body)
    text = f"error ({err.get('code')}"
    if err.get("reason"):
        text += f", {err['reason']}"
    text += f"): {err.get('message')}"
    if err.get("did_you_mean"):
        text += f"\ndid you mean: {err['did_you_mean']}"
    return text, True


class Loop:
    """One agent run, driven from its creation to its end."""

    def __init__(self, gw, key, workspace, agent, model, wait="60s", poll=2.0, out=sys.stdout):
        self.gw, self.key, self.workspace, self.agent = gw, key, workspace, agent
        self.model, self.wait, self.poll, self.out = model, wait, poll, out
        self.run_id = self.grant = None
        # last_proposal is the proposal the last ProposeChange made: a
        # scripted ApplyChange of "$last" means it.
        self.last_proposal = None

    def say(self, *lines):
        for line in lines:
            print(line, file=self.out, flush=True)

    def start(self):
        status, body = self.gw.call("POST", "/v1/runs", self.key, {"workspace": self.workspace, "agent": self.agent})
        if status != 201:
            err = error_of(body)
            raise GatewayError(f"POST /v1/runs: {status} {err.get('code')}: {err.get('message')}")
        self.run_id, self.grant = body["id"], body.get("grant", "")
        if not self.grant.startswith("rg_"):
            raise GatewayError(f"POST /v1/runs: run {self.run_id} came without a grant (is {self.agent!r} an agent?)")
        agent = body.get("agent") or {}
        self.say(f"run {self.run_id} of agent {agent.get('name', self.agent)} in {self.workspace}: {self.gw.run_page(self.run_id)}",
                 f"  tools: {', '.join(agent.get('tools') or [])}; grant expires {agent.get('grant_expires', '?')}")

    def path(self, suffix=""):
        return f"/v1/runs/{urllib.parse.quote(self.run_id)}{suffix}"

    def get_run(self):
        """The run, read with its grant; with the key once the grant is
        refused (it dies with the run: the run ended)."""
        status, body = self.gw.call("GET", self.path(), self.grant)
        if status in (401, 403):
            status, body = self.gw.call("GET", self.path(), self.key)
        if status != 200:
            err = error_of(body)
            raise GatewayError(f"GET {self.path()}: {status} {err.get('code')}: {err.get('message')}")
        return body

    def tool_call(self, call):
        """Posts one tool call; returns (status, body)."""
        suffix = "/steps"
        if call["tool"] == "Bash":
            suffix += "?wait=" + urllib.parse.quote(self.wait)
        return self.gw.call("POST", self.path(suffix), self.grant, {"tool": call["tool"], "input": call.get("input", {})}, timeout=900)

    def wait_step(self, step_id):
        """Waits until a Bash step answered before its exit has ended."""
        while True:
            run = self.get_run()
            step = next((s for s in run.get("steps", []) if s.get("id") == step_id), None)
            if step is None or step.get("state") not in LIVE_STEP_STATES:
                return step
            time.sleep(self.poll)

    def wait_approval(self, proposal):
        """Waits while the run awaits a person's approval; returns the run."""
        self.say(f"  waiting for a person to approve {proposal}: {self.gw.run_page(self.run_id)}")
        while True:
            run = self.get_run()
            if run.get("state") != "awaiting_approval":
                return run
            time.sleep(self.poll)

    def proposal_state(self, proposal):
        status, body = self.gw.call("GET", self.path("/proposals/" + urllib.parse.quote(proposal)), self.grant)
        return body if status == 200 else {}

    def step(self, call):
        """Makes one tool call as the model asked; returns the observation
        ((text, is_error), what the model reads next) and whether the run
        is still live."""
        if call["tool"] == "ApplyChange" and (call.get("input") or {}).get("proposal") == "$last":
            call = {"tool": "ApplyChange", "input": {"proposal": self.last_proposal or ""}}
        self.say(f"> {call['tool']} {json.dumps(call.get('input', {}), sort_keys=True)}")
        status, body = self.tool_call(call)
        if status == 202 and call["tool"] == "ApplyChange":
            proposal = (call.get("input") or {}).get("proposal", "")
            run = self.wait_approval(proposal)
            if run.get("state") != "running":
                text = f"the run ended while it waited: {run.get('state')}"
                self.say("< " + text)
                return (text, True), False
            p = self.proposal_state(proposal)
            if p.get("state") != "approved":
                by = (p.get("rejected_by") or {}).get("id", "a person")
                text = f"proposal {proposal} was not approved ({p.get('state', 'unknown')}) by {by}: {p.get('reason', '')}"
                self.say("< " + text)
                return (text, True), True
            self.say(f"  approved by {(p.get('approved_by') or {}).get('id', 'a person')}; applying it")
            self.say(f"> {call['tool']} {json.dumps(call.get('input', {}), sort_keys=True)}")
            status, body = self.tool_call(call)
        if status == 409:
            run = self.get_run()
            if run.get("state") not in ("running", "awaiting_approval"):
                text = f"the run has ended: {run.get('state')}"
                self.say("< " + text)
                return (text, True), False
        if status == 401 or status == 403 and error_of(body).get("code") != "refused":
            err = error_of(body)
            raise GatewayError(f"{call['tool']}: {status} {err.get('code')}: {err.get('message')}")
        if status == 200 and call["tool"] == "Bash":
            result = body.get("result") or {}
            if result.get("exit_code") is None and body.get("step", {}).get("id"):
                self.say("  the step is still running; waiting for its end (its output is on the run page)")
                st = self.wait_step(body["step"]["id"])
                if st:
                    body["step"] = st
                    result["state"], result["exit_code"] = st.get("state"), st.get("exit_code")
        if status == 200 and call["tool"] == "ProposeChange":
            self.last_proposal = (body.get("result") or {}).get("proposal") or self.last_proposal
        text, is_error = observe(call, status, body)
        step = (body or {}).get("step") or {}
        if step:
            head = f"< step {step.get('index')} {step.get('state')}"
        elif status == 403:
            head = "< refused"
        else:
            head = f"< {status}"
        summary = (step.get("tool") or {}).get("summary")
        if summary:
            head += f": {summary}"
        self.say(head, *("  " + line for line in text.splitlines()))
        return (text, is_error), True

    def finish(self, live=True):
        """Finishes the run as the model says (unless it ended already);
        returns its final state."""
        status, body = 0, None
        if live:
            status, body = self.gw.call("POST", self.path("/finish"), self.grant, self.model.finish() or {})
            if status != 200:
                err = error_of(body)
                self.say(f"finish: {status} {err.get('code')}: {err.get('message')}")
        run = body if status == 200 and isinstance(body, dict) and body.get("state") else self.get_run()
        self.say(f"run {self.run_id} {run.get('state')}; refusals: {run.get('refusals', 0)}; {self.gw.run_page(self.run_id)}")
        return run.get("state")

    def drive(self):
        """The whole loop; returns the run's final state."""
        self.start()
        observation, live = None, True
        while live:
            call = self.model.next(observation)
            if call is None:
                break
            observation, live = self.step(call)
        return self.finish(live)


def main(argv=None):
    p = argparse.ArgumentParser(description="Drive a Rodon agent run from a scripted model (see README.md).")
    p.add_argument("--workspace", help="the workspace (ws-...)")
    p.add_argument("--agent", help="the agent: agents/AGENT.md at the workspace head")
    p.add_argument("--script", help="the scripted model: a JSON file of tool calls")
    p.add_argument("--wait", default="60s", help="how long a Bash call waits for its exit (default 60s, at most 10m)")
    p.add_argument("--poll", type=float, default=2.0, help="seconds between polls of an awaiting run (default 2)")
    p.add_argument("--print-tools", action="store_true", help="print the tool list a model is given, as JSON, and exit")
    args = p.parse_args(argv)
    if args.print_tools:
        json.dump(TOOLS, sys.stdout, indent=2)
        print()
        return 0
    missing = [f"--{n}" for n in ("workspace", "agent", "script") if not getattr(args, n)]
    missing += [e for e in ("RODON_GATEWAY", "RODON_KEY") if not os.environ.get(e)]
    if missing:
        p.print_usage(sys.stderr)
        print(f"agent.py: missing {', '.join(missing)}", file=sys.stderr)
        return 2
    try:
        model = ScriptedModel(args.script)
        gw = Gateway(os.environ["RODON_GATEWAY"], os.environ.get("RODON_CA"))
        state = Loop(gw, os.environ["RODON_KEY"], args.workspace, args.agent, model, args.wait, args.poll).drive()
    except (GatewayError, OSError, ValueError) as e:
        print(f"agent.py: {e}", file=sys.stderr)
        return 2
    return 0 if state == "succeeded" else 1


if __name__ == "__main__":
    sys.exit(main())
