"""APO end to end: Trainer, 4 runner threads, the in-memory store, the room agent and the offline stand-in models.

Everything is real but the models: rollouts go through the store and runners, the agent's OpenAI calls are
traced and read back with ``TraceToMessages``, the critique and edit prompts are rendered by POML and sent
over HTTP to the stand-in (see ``packages/agl-testing/src/agl/testing/apo_standin.py``).
"""

from __future__ import annotations

import asyncio
import json
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import openai
import pytest
from agl.algorithms.adapter import TraceToMessages
from agl.algorithms.apo import APO, RetryPolicy
from agl.algorithms.metrics import AlgorithmMetrics
from agl.runner import Trainer
from agl.store import InMemoryLightningStore
from agl.testing.apo_standin import INSTRUCTIONS, ApoStandinBackend, rules_in, serve_apo_standin
from agl.testing.openai_standin import StandinServer
from agl.types import LLM, PromptTemplate
from prometheus_client import CollectorRegistry
from room_selector.agent import SEED_PROMPT, make_room_selector
from room_selector.tasks import load_tasks, split_tasks

pytestmark = pytest.mark.slow

FAST_RETRIES = RetryPolicy(max_attempts=2, initial_backoff_s=0.01, max_backoff_s=0.02)
TRAIN, VAL = split_tasks(load_tasks())


@pytest.fixture(scope="module")
def standin() -> Iterator[StandinServer]:
    with serve_apo_standin(ApoStandinBackend()) as server:
        yield server


def make_apo(standin: StandinServer, **kwargs: Any) -> APO[Any]:
    options: dict[str, Any] = {
        "gradient_model": "critic-model",
        "apply_edit_model": "editor-model",
        "gradient_batch_size": 4,
        "val_batch_size": 10,
        "beam_width": 2,
        "branch_factor": 2,
        "beam_rounds": 2,
        "rollout_batch_timeout": 120.0,
        "retry_policy": FAST_RETRIES,
        "seed": 0,
    }
    options.update(kwargs)
    # No client of ours: APO makes one from OPENAI_* (set by fit) for the run and closes it on the run's loop.
    return APO(None, **options)


def fit(
    standin: StandinServer, apo: APO[Any], *, resources: dict[str, Any] | None = None, agent: Any = None
) -> InMemoryLightningStore:
    store = InMemoryLightningStore()
    trainer = Trainer(
        algorithm=apo,
        n_runners=4,
        strategy="shm",
        store=store,
        initial_resources=resources or {"prompt_template": PromptTemplate(template=SEED_PROMPT)},
        adapter=TraceToMessages(),
        progress=False,
    )
    agent = agent or make_room_selector("agent-model", base_url=standin.base_url, api_key="test")
    with pytest.MonkeyPatch.context() as env:
        env.setenv("OPENAI_BASE_URL", standin.base_url)
        env.setenv("OPENAI_API_KEY", "test")
        trainer.fit(agent, TRAIN, val_dataset=VAL)
    return store


@dataclass
class Run:
    apo: APO[Any]
    store: InMemoryLightningStore
    calls: Counter[str]


@pytest.fixture(scope="module")
def run(standin: StandinServer, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Run]:
    backend = standin.backend
    assert isinstance(backend, ApoStandinBackend)
    before = Counter(backend.calls)
    metrics = AlgorithmMetrics(
        "apo", tmp_path_factory.mktemp("apo") / "metrics.jsonl", registry=CollectorRegistry()
    )
    apo = make_apo(standin, metrics=metrics)
    store = fit(standin, apo)
    yield Run(apo, store, backend.calls - before)
    metrics.close()


def test_best_prompt_scores_strictly_higher_than_the_seed(run: Run) -> None:
    seed_score = run.apo.rounds[0].leader_val_score
    best = run.apo.get_best_candidate()
    assert seed_score is not None and best.full_val_score is not None
    assert best.full_val_score > seed_score
    assert best.version != "v0" and best.critique
    # the improvement comes from instructions the critique asked for
    assert rules_in(run.apo.get_best_prompt().template)
    assert run.apo.get_best_prompt().template.startswith(SEED_PROMPT)


def test_each_round_s_scores_go_to_the_metrics_interface(run: Run) -> None:
    metrics = run.apo.metrics
    assert metrics.jsonl_path is not None
    lines = [json.loads(line) for line in metrics.jsonl_path.read_text().splitlines()]
    assert [line["round"] for line in lines] == [r.round for r in run.apo.rounds]
    assert {line["kind"] for line in lines} == {"round"}
    last = run.apo.rounds[-1]
    labels = {"algorithm": "apo", "kind": "round"}
    assert metrics.registry.get_sample_value("agl_algorithm_best_score", labels) == last.best_score
    assert metrics.registry.get_sample_value("agl_algorithm_records_total", labels) == len(run.apo.rounds)
    assert metrics.registry.get_sample_value("agl_algorithm_val_rollouts", labels) == last.val_rollouts


def test_best_prompt_is_published_as_the_latest_resources(run: Run) -> None:
    latest = asyncio.run(run.store.get_latest_resources())
    assert latest is not None and latest.resources_id == run.apo.get_best_candidate().version
    assert latest.resources["prompt_template"] == run.apo.get_best_prompt()


def test_rollouts_per_round_follow_the_cost_formula(run: Run) -> None:
    bw, bf, gbs, vbs, n_val = 2, 2, 4, 10, len(VAL)
    rounds = run.apo.rounds
    assert [r.round for r in rounds] == [0, 1, 2]
    assert (rounds[0].train_rollouts, rounds[0].val_rollouts) == (0, n_val)
    assert rounds[1].children_skipped == 0  # the seed fails most tasks: every critique asks for something
    beam_before = 1
    for summary in rounds[1:]:
        # a child may be dropped when its edit changes nothing: it was never scored on validation
        made = bw * bf - summary.children_skipped
        assert len(summary.candidates) == beam_before + made
        assert summary.train_rollouts == bw * bf * gbs
        assert summary.val_rollouts == (beam_before + made) * vbs + n_val
        assert summary.llm_requests == summary.llm_calls_ok == 2 * bw * bf  # the stand-in never fails
        beam_before = len(summary.beam)
    # the store saw exactly those rollouts, all finished
    rollouts = asyncio.run(run.store.query_rollouts()).items
    by_mode = Counter(r.mode for r in rollouts)
    assert by_mode["train"] == sum(r.train_rollouts for r in rounds)
    assert by_mode["val"] == sum(r.val_rollouts for r in rounds)
    assert {r.status for r in rollouts} == {"succeeded"}
    # and the stand-in saw one critique and one edit per child
    assert run.calls["critic"] == run.calls["editor"] == 2 * bw * bf


def test_short_beam_replicates_its_parent(run: Run) -> None:
    children = [e for e in run.apo.history if e["event"] == "candidate" and e["round"] == 1]
    assert len(children) == 4 and {e["parent"] for e in children} == {"v0"}
    assert all(e["critique"] for e in children)


def test_history_holds_every_candidate_with_parent_critique_and_scores(run: Run) -> None:
    candidates = {e["version"]: e for e in run.apo.history if e["event"] == "candidate"}
    scores = [e for e in run.apo.history if e["event"] == "score"]
    made = sum(2 * 2 - r.children_skipped for r in run.apo.rounds[1:])
    assert list(candidates) == [f"v{i}" for i in range(1 + made)]  # versioned in order, without gaps
    assert {s["version"] for s in scores} <= set(candidates)
    for summary in run.apo.rounds[1:]:
        assert {c["version"] for c in summary.candidates} >= set(summary.beam)
    # every instruction a child holds beyond its parent was asked for by its critique
    for event in candidates.values():
        if event["parent"] is None:
            continue
        parent = candidates[event["parent"]]["templates"]["prompt_template"]["template"]
        child = event["templates"]["prompt_template"]["template"]
        added = [rule for rule in rules_in(child) if rule not in rules_in(parent)]
        assert added and all(INSTRUCTIONS[rule] in child for rule in added)
        assert all(rule in rules_in(event["critique"]) for rule in added)


def test_children_are_skipped_when_the_editor_fails(standin: StandinServer) -> None:
    backend = standin.backend
    assert isinstance(backend, ApoStandinBackend)
    backend.fail_always("editor", "server_error")
    try:
        apo = make_apo(standin, beam_width=1, branch_factor=2, beam_rounds=1)
        fit(standin, apo)
    finally:
        backend.fail_always("editor", None)
    skipped = [e for e in apo.history if e["event"] == "skipped"]
    assert len(skipped) == 2 and all("HTTP 500" in e["reason"] and e["critique"] for e in skipped)
    summary = apo.rounds[1]
    assert summary.children_skipped == 2 and summary.beam == ["v0"]
    assert summary.llm_requests == 2 * (1 + FAST_RETRIES.max_attempts)  # per child: critique + 2 edit tries
    assert summary.val_rollouts == 1 * 10 + len(VAL)  # only the seed is left to score
    assert apo.get_best_candidate().version == "v0"


def test_an_editor_that_recovers_after_a_retry_still_yields_the_child(standin: StandinServer) -> None:
    backend = standin.backend
    assert isinstance(backend, ApoStandinBackend)
    backend.queue_faults("editor", "rate_limit")
    apo = make_apo(standin, beam_width=1, branch_factor=1, beam_rounds=1, run_initial_validation=False)
    fit(standin, apo)
    summary = apo.rounds[0]
    assert summary.round == 1 and summary.children_skipped == 0
    assert summary.llm_requests == 3 and summary.llm_calls_ok == 2
    assert [c["version"] for c in summary.candidates] == ["v0", "v1"]


def test_several_prompt_templates_are_optimised_in_turn(standin: StandinServer) -> None:
    resources = {
        "main_llm": LLM(endpoint=standin.base_url, model="agent-model"),
        "prompt_template": PromptTemplate(template=SEED_PROMPT),
        "style": PromptTemplate(template="Be brief and answer in one line, naming the room."),
    }
    apo = make_apo(
        standin, beam_width=1, branch_factor=2, beam_rounds=1, prompt_names=["prompt_template", "style"]
    )

    from agl.runner import rollout
    from room_selector.agent import open_client, run_room_agent
    from room_selector.world import RoomRequest, extract_choice

    @rollout
    async def two_prompt_agent(task: Any, prompt_template: PromptTemplate, resources: Any) -> float:
        request = RoomRequest.from_dict(task["task_input"])
        system = prompt_template.format() + "\n" + resources["style"].format()
        async with open_client(standin.base_url, "test") as client:
            answer = await run_room_agent(client, "agent-model", system, request)
        return 1.0 if extract_choice(answer) == task["expected_choice"] else 0.0

    store = fit(standin, apo, resources=resources, agent=two_prompt_agent)
    children = [e for e in apo.history if e["event"] == "candidate" and e["parent"] is not None]
    assert [e["edited"] for e in children] == ["prompt_template", "style"]
    for event in children:
        templates = event["templates"]
        other = "style" if event["edited"] == "prompt_template" else "prompt_template"
        assert templates[other]["template"] == resources[other].template  # only the edited one changed
        assert templates[event["edited"]]["template"] != resources[event["edited"]].template
    best = apo.get_best_prompts()
    assert set(best) == {"prompt_template", "style"}
    latest = asyncio.run(store.get_latest_resources())
    assert latest is not None and set(latest.resources) == {"main_llm", "prompt_template", "style"}


def test_rollouts_that_outlive_the_batch_timeout_are_cancelled_and_left_out() -> None:
    backend = ApoStandinBackend(slow_s=4.0)
    with serve_apo_standin(backend) as standin:
        backend.queue_faults("agent", "slow", "slow", "slow", "slow")  # every runner's first call hangs
        apo = make_apo(standin, beam_rounds=0, rollout_batch_timeout=1.5)
        store = fit(standin, apo)
    summary = apo.rounds[0]
    assert summary.val_rollouts == len(VAL) and summary.leader_val_score == 0.0  # nothing finished in time
    rollouts = asyncio.run(store.query_rollouts()).items
    cancelled = [r for r in rollouts if r.status == "cancelled"]
    never_started = [r for r in cancelled if not asyncio.run(store.query_attempts(r.rollout_id)).items]
    # the 4 hanging ones were running; every queued one was withdrawn before a runner took it
    assert len(never_started) == len(VAL) - 4


def test_a_wrong_api_key_stops_the_run_at_once(standin: StandinServer) -> None:
    backend = standin.backend
    assert isinstance(backend, ApoStandinBackend)
    before = backend.calls["critic"]
    backend.fail_always("critic", "unauthorized")
    try:
        apo = make_apo(standin, beam_rounds=1, run_initial_validation=False)
        with pytest.raises(openai.AuthenticationError):
            fit(standin, apo)
    finally:
        backend.fail_always("critic", None)
    assert 1 <= backend.calls["critic"] - before <= 4  # no retries: each child asked at most once
    assert apo.rounds == []
