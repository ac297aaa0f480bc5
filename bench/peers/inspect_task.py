"""The bench/peers task for Inspect AI: the same trivial task Evals.si runs.

Each sample is one trial: Inspect's Docker sandbox (a compose project per
sample) with greeting.txt in the working directory, one command run by the
solver (the agent's command), then one check run by the scorer, scored by
its exit code. No model is called: the solver does what a scripted agent
would, and the eval runs with Inspect's mockllm/model.

Set by bench/peers: EVALSI_PEERS_N (samples), EVALSI_PEERS_COMPOSE (the
compose file), EVALSI_PEERS_COMMAND, EVALSI_PEERS_CHECK (sh -c strings), and
EVALSI_PEERS_SKIP_ENGINE_GATE=1 when the Docker daemon is older than the
version Inspect's prerequisite check asks for (see bench/peers' README text).
"""

import os

from inspect_ai import Task, task
from inspect_ai.dataset import Sample
from inspect_ai.scorer import CORRECT, INCORRECT, Score, Target, accuracy, scorer
from inspect_ai.solver import Generate, TaskState, solver
from inspect_ai.util import sandbox

if os.environ.get("EVALSI_PEERS_SKIP_ENGINE_GATE") == "1":
    # Only the Docker Engine version gate is skipped; the compose version
    # check and everything the sandbox does stay as shipped.
    from inspect_ai.util._sandbox.docker import prereqs

    async def _no_engine_gate(version: str = "") -> None:
        return None

    prereqs.validate_docker_engine = _no_engine_gate


@solver
def run_command():
    async def solve(state: TaskState, generate: Generate) -> TaskState:
        result = await sandbox().exec(["sh", "-c", os.environ["EVALSI_PEERS_COMMAND"]])
        state.output.completion = result.stdout
        state.metadata["command_exit"] = result.returncode
        return state

    return solve


@scorer(metrics=[accuracy()])
def check():
    async def score(state: TaskState, target: Target) -> Score:
        result = await sandbox().exec(["sh", "-c", os.environ["EVALSI_PEERS_CHECK"]])
        return Score(
            value=CORRECT if result.returncode == 0 else INCORRECT,
            explanation=f"check exited {result.returncode}",
        )

    return score


@task
def evalsipeers():
    n = int(os.environ.get("EVALSI_PEERS_N", "1"))
    return Task(
        dataset=[
            Sample(id=f"t{i:05d}", input="Print the greeting.", files={"greeting.txt": "hello\n"})
            for i in range(n)
        ],
        solver=run_command(),
        scorer=check(),
        sandbox=("docker", os.environ["EVALSI_PEERS_COMPOSE"]),
    )
