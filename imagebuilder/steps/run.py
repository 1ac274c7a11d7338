"""A run: the steps a command composes (`build` = stage + verify + publish; `stage`, `verify` and `publish` each
their own), on one plan, one ledger and the ports. It serves the wheelhouses and index proxies for the run's
length, shows progress, and cleans up on every exit: no container of the run outlives it, no worker moves a
tag after it. The reports are written from the ledger, also when the run is interrupted."""

from __future__ import annotations

import dataclasses
import datetime
import os
import socket
import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.markup import escape

from ..evidence.signing import Keys
from ..evidence.sigstore import Layouts
from ..evidence.spec import Specs
from ..ledger import Ledger, NodeRecord
from ..plan.keys import LABEL_PREFIX
from ..plan.plan import Plan
from ..ports import Engine
from ..ports.registry import Registries
from ..report import print_summary, write_reports
from ..run import schedule
from ..run.context import Images, RunContext, Step
from ..run.display import Terminal
from ..run.logs import Logs
from ..run.loopback import Upstream, index_credentials_of, index_passwords, serve_indexes
from ..secrets import redact
from ..secrets.scan import Scanner

RUN_LABEL = f"{LABEL_PREFIX}.run"


@dataclass(frozen=True)
class RunOptions:
    """How the command runs the steps (`execute`): where reports and the local mirror go, how many tasks at once,
    whether to stop after a failure, what the display shows, what report.json says of the command and where the
    ecosystem's copies of evidence go. Made by the command line (`cli.running.run_steps`)."""

    report_dir: Path
    cache_dir: Path  # the local mirror of pass records
    jobs: int = 1  # independent tasks at once
    fail_fast: bool = False  # start nothing new after the first failure
    logs: str = "stream"  # the display's mode (`choices.LOG_MODES`); none: a summary only
    meta: Mapping[str, Any] = field(default_factory=dict)  # what report.json says of the command
    layouts: Layouts = field(default_factory=Layouts)  # the ecosystem's copies of evidence (`sigstore`)


def compose(steps: Sequence[Step], run: RunContext) -> list[schedule.Task]:
    """Every step's tasks in one graph. A task waits for the tasks of earlier steps on its nodes; a step the
    command leaves out has none, so those waits are dropped."""
    tasks = [task for one in steps for task in one.tasks(run)]
    ids = {t.id for t in tasks}
    return [dataclasses.replace(t, deps=tuple(d for d in t.deps if d in ids)) for t in tasks]


def registry_passwords(plan: Plan, registries: Registries) -> list[tuple[str, str]]:
    hosts = {e.target.host for e in plan.entries()}
    return [(f"the password for registry {host}", auth[1]) for host in sorted(hosts)
            if (auth := registries(host).auth) is not None]


def execute(engine: Engine, plan: Plan, registries: Registries, specs: Specs, keys: Keys, steps: Sequence[Step],
            console: Console, options: RunOptions) -> list[NodeRecord]:
    """Run the steps over the plan; the ledger's records, once the reports are written and the summary shown."""
    ledger = Ledger.of(plan)
    run_id = uuid.uuid4().hex[:12]
    engine.run_labels[RUN_LABEL] = run_id
    index_auth = index_credentials_of(plan, os.environ)
    secrets = redact.known_secrets(os.environ, [*registry_passwords(plan, registries), *index_passwords(index_auth)])
    wheelhouses = {e.build.wheelhouse for e in plan.entries() if e.build.wheelhouse}
    cafile = next((e.build.ca_bundle for e in plan.entries() if e.build.ca_bundle), None)
    interrupted = False
    upstream = Upstream.of_config(os.environ)  # the Docker client config's proxies, which builds are given too
    pinned = {w.folder: w.files for w in plan.wheelhouses}  # (a locked wheelhouse serves what its lock pins only)
    with serve_indexes(index_auth, cafile, upstream, wheelhouses, pinned) as proxied, \
            Terminal(console, len(plan.nodes), options.logs) as display:
        if proxied.urls or proxied.wheelhouses:  # masked wherever a build might print it (pip's errors name it)
            secrets = {**secrets, "the run's index proxy token": proxied.token}
        logs = Logs(display, options.report_dir / "logs", secrets)
        registries.on_retry = lambda line: logs.say(f"[yellow]  {escape(line)}[/]")
        logs.say(f"[dim]{escape(keys.said())}[/]")
        for url, creds in index_auth.items():
            logs.say(f"[dim]index {escape(url)}: credentials from {escape(creds.source)}, served to this run's "
                     f"builds through {escape(proxied.urls[url])} (they never enter an image)[/]")
        run = RunContext(plan, ledger, Images(engine, ledger, registries, logs), registries, logs, specs,
                         Scanner(secrets), keys, options.cache_dir, proxied, options.layouts)
        try:
            for one in steps:
                one.start(run)
            outcome = schedule.run(compose(steps, run), jobs=options.jobs, fail_fast=options.fail_fast)
        except KeyboardInterrupt:  # Ctrl-C or SIGTERM: what finished stays; the rest says it was interrupted
            interrupted = True
            run.stopping.set()  # first: no worker still running moves a tag after this
            for one in steps:
                one.interrupted(run)
            raise
        finally:  # also on Ctrl-C: no container of this run outlives it, no worker starts another, and no
            run.stopping.set()  # worker still running moves a tag
            engine.close_containers()
            engine.remove_containers(f"{RUN_LABEL}={run_id}")
            if interrupted:
                report(ledger, secrets, console, options, interrupted=True)
    for one in steps:
        one.cancelled(run, outcome.not_started)
    records = report(ledger, secrets, console, options, interrupted=False)
    if outcome.error is not None:  # a bug in a task: what the run did is reported first
        raise outcome.error
    return records


def report(ledger: Ledger, secrets: Mapping[str, str], console: Console, options: RunOptions, *,
           interrupted: bool) -> list[NodeRecord]:
    """report.json, summary.md and junit.xml from the ledger (every known secret masked), and the summary."""
    ledger.masked(lambda text: redact.mask(text, secrets))
    records = ledger.records()
    meta = {**options.meta, "attestations": options.layouts.found(),
            "finished": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
            "host": socket.gethostname(), "interrupted": interrupted}
    written = write_reports(records, options.report_dir, meta)
    if not interrupted:
        print_summary(console, records)
        console.print(f"reports: {', '.join(str(p) for p in written)}", highlight=False)
    return records
