"""Train a Conductor with GRPO (TRL) from nothing but the reward of running its workflows.

Each prompt is the conductor prompt the server sends (the pool's full or compact prompt, then the task), for a random
k-of-n sub-pool seeded per prompt, as in the paper. Each completion is parsed by the server's parser, run on
that sub-pool by the server's executor and checked by a verifier (conductor_mcp/learning/rewards.py). The last
--recursion-steps steps use pools that offer the conductor itself as a worker (the paper's recursion phase).
Output: a LoRA adapter, a card (card.json and README.md: base model, data, pool, recipe, reward curve) and
reward_curve.png; tools/serve_conductor.py serves the adapter on vLLM. tools/train_conductor.py is the command.
A run longer than a session resumes with the same command: finished phases are kept and GRPO continues from its
last checkpoint (learning/resume.py; --session-minutes ends a session there by itself).

The defaults are the paper's recipe (a GPU job): Qwen2.5-7B-Instruct, 200 steps of 4 questions x 64 rollouts,
temperature 1.0, learning rate 1e-6, no KL term, completions of up to 1024 tokens:

    python tools/train_conductor.py --pool paper --dataset train.jsonl --use-vllm --out conductor-7b

A CPU run on the embedded model (convert it first with tools/convert_gguf.py):

    python tools/train_conductor.py --base-model ~/.cache/conductor-mcp/models/gemma3-270m-hf \\
        --pool sim-specialists --sim-tasks 64 --sim-domains math,code --steps 36 --questions 4 --group-size 8 \\
        --max-completion-length 4 --lr 1e-4 --entropy-coef 0.05 --lora-r 8 --lora-alpha 16 --completion worker \\
        --seed 1 --eval-tasks 32 --out conductor-cpu

(40 minutes on 2 cores; its card and curve are in tools/results/grpo-cpu-sim-specialists.)

`--completion worker` is a curriculum for models too small to write a whole workflow: the policy writes only
the worker id of a one-step workflow (the prompt ends in the workflow's JSON up to the id), so what it can
learn is which worker to pick for which task; the reward path is unchanged.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import tempfile
import threading
import time
from collections.abc import Callable, Coroutine
from pathlib import Path
from typing import Any, TypeVar

from conductor_mcp.config import Settings, builtin_pool_dir
from conductor_mcp.core import prompts
from conductor_mcp.core.pool import Pool
from conductor_mcp.errors import RequestError
from conductor_mcp.learning import card, decisions, resume, subpools, warm_start
from conductor_mcp.learning.code_checks import code_sandbox_problem
from conductor_mcp.learning.rewards import Outcome, WorkflowReward
from conductor_mcp.learning.sim_tasks import rules_of
from conductor_mcp.learning.subpools import held_out_pool, training_pool, training_pools, worker_order
from conductor_mcp.learning.train_options import held_out_tasks, training_tasks
from conductor_mcp.runtime.logs import configure_logging
from conductor_mcp.service.catalogue import load_pool
from conductor_mcp.service.service import Service

T = TypeVar("T")
WORKER_PREFILL = '{"reasoning": "Route the task to one worker.", "steps": [{"worker": "'
WORKER_SUFFIX = '", "instruction": "Solve the task and state the final answer.", "access": []}]}'


def prompt_text(tokenizer: Any, messages: list[dict[str, str]]) -> str:
    """The chat-templated prompt as text that TRL and generate() tokenize to the ids a server sends the model.

    TRL tokenizes a text prompt with the tokenizer's special tokens, and vLLM renders the same template with its
    BOS. A tokenizer that adds BOS itself would double the template's, so it is stripped; one that does not (the
    tokenizer converted from the embedded GGUF) must keep it, or the policy trains on prompts it is never served.
    """
    text = tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)
    bos_id = tokenizer.bos_token_id
    if bos_id is not None and tokenizer("x")["input_ids"][:1] == [bos_id]:
        text = text.removeprefix(tokenizer.bos_token)
    return text


def build_rows(
    args: argparse.Namespace,
    pool: Pool,
    tokenizer: Any,
    tasks: list[dict[str, Any]],
    count: int,
    recursion_rows: int,
    held_out: bool = False,
) -> tuple[list[dict[str, Any]], dict[str, Pool]]:
    """One row per rollout group: the prompt text (chat template applied), the task and its sub-pool's name.

    Held-out rows draw their sub-pools from their own seeds, and never a worker order any training row has."""
    pools: dict[str, Pool] = {}
    rows = []
    seen = {worker_order(p) for p in training_pools(args, pool, count)} if held_out and args.subpool_k else set()
    for i in range(count):
        task = tasks[i % len(tasks)]
        sub = held_out_pool(args, pool, task, seen) if held_out else training_pool(args, pool, i, task)
        if i >= count - recursion_rows:
            sub = sub.model_copy(update={"name": f"{sub.name}+recursion", "recursion": True})
        pools[sub.name] = sub
        rows.append(
            {"prompt": policy_prompt(args, tokenizer, sub, task), "task": json.dumps(task), "pool_name": sub.name}
        )
    return rows, pools


def policy_prompt(args: argparse.Namespace, tokenizer: Any, pool: Pool, task: dict[str, Any]) -> str:
    """The prompt text the policy completes for a task on a (sub-)pool, in the run's completion encoding."""
    if args.completion in decisions.ENCODINGS:
        assessed = args.completion == "assessed"
        prompt = prompt_text(tokenizer, decisions.messages(pool, task["question"], assessed))
        return prompt + decisions.prefill(assessed)
    messages = prompts.conductor_messages(pool, args.max_steps_per_workflow, task["question"], None)
    return prompt_text(tokenizer, messages) + (WORKER_PREFILL if args.completion == "worker" else "")


def completion_text(args: argparse.Namespace, completion: Any, pool: Pool, task: dict[str, Any]) -> str:
    """A completion as the workflow the reward runs (the encodings that write only part of it are filled in)."""
    text = completion if isinstance(completion, str) else completion[0]["content"]
    if args.completion == "worker":  # the policy wrote the worker id: close the one-step workflow around it
        return WORKER_PREFILL + text.split('"', 1)[0].strip() + WORKER_SUFFIX
    if args.completion in decisions.ENCODINGS:
        return decisions.completion_workflow(text, pool, task, assessed=args.completion == "assessed")
    return text


class Scorer:
    """Scores completions with the workflow reward on one event loop that lives as long as the process.

    TRL calls the reward during training and the held-out evaluation calls it around training; one loop keeps
    litellm's background workers and the per-loop endpoint limits valid for both. The service's store (every
    rollout's run, tens of MB over a run) lives in a folder of the scorer's own, removed when it closes.
    """

    def __init__(self, args: argparse.Namespace) -> None:
        self._state = tempfile.TemporaryDirectory(prefix="conductor-train-")
        settings = Settings.from_env(state_dir=Path(self._state.name), sim_time_scale=0.0)  # rewards need no latency
        self.loop = asyncio.new_event_loop()
        threading.Thread(target=self.loop.run_forever, name="conductor-rewards", daemon=True).start()
        self._lifespan = contextlib.AsyncExitStack()  # the service lives on the scorer's loop until close()
        service = self._on_loop(self._lifespan.enter_async_context(Service.open(settings)))
        self.reward = WorkflowReward(
            service,
            args.max_steps_per_workflow,
            cost_weight=args.cost_weight,
            cost_scale_usd=rules_of(args.sim_set).cost_scale_usd,
            allow_unsafe_local_exec=args.unsafe_local_exec,
        )

    def _on_loop(self, coroutine: Coroutine[Any, Any, T]) -> T:
        return asyncio.run_coroutine_threadsafe(coroutine, self.loop).result()

    def __call__(self, completions: list[str], tasks: list[dict[str, Any]], pools: list[Pool]) -> list[Outcome]:
        return self._on_loop(self.reward.score_batch(completions, tasks, pools))

    def close(self) -> None:
        """Close the service (its store and lease), stop the loop and remove the store's folder."""
        try:
            self._on_loop(self._lifespan.aclose())
            self.loop.call_soon_threadsafe(self.loop.stop)
        finally:
            self._state.cleanup()


class RewardFunction:
    """TRL's reward function: run each completion's workflow and score its answer; it keeps the reward curve and,
    per call, what the rollouts wrote and how their rewards spread within each group, appended to OUT/rewards.jsonl
    as well so that a resumed run's card has the whole curve (`kept`: the calls of the steps already done)."""

    def __init__(
        self, args: argparse.Namespace, scorer: Scorer, pools: dict[str, Pool], kept: list[dict[str, Any]]
    ) -> None:
        self.args, self.scorer, self.pools = args, scorer, pools
        self.curve: list[float] = [k["mean"] for k in kept]
        self.rollouts: list[dict[str, Any]] = [k["rollouts"] for k in kept]
        self.__name__ = "workflow_reward"  # TRL names the reward in its logs

    def __call__(
        self, prompts: list[Any], completions: list[Any], task: list[str], pool_name: list[str], **_: Any
    ) -> list[float]:
        tasks, pools = [json.loads(t) for t in task], [self.pools[n] for n in pool_name]
        texts = [completion_text(self.args, c, p, t) for c, p, t in zip(completions, pools, tasks, strict=True)]
        outcomes = self.scorer(texts, tasks, pools)
        scores = [o.reward for o in outcomes]
        self.curve.append(sum(scores) / len(scores))
        self.rollouts.append(card.rollout_stats(completions, tasks, outcomes, self.args.group_size))
        with (self.args.out / resume.REWARDS).open("a") as sink:
            sink.write(json.dumps({"mean": self.curve[-1], "rollouts": self.rollouts[-1]}) + "\n")
        return scores


def evaluation_prompts(
    args: argparse.Namespace, tokenizer: Any, pool: Pool, tasks: list[dict[str, Any]], shuffled: bool
) -> tuple[list[Pool], list[str]]:
    """The held-out tasks' sub-pools and the prompts the policy reads for them (their descriptions shuffled among
    the workers where `shuffled`)."""
    rows, pools = build_rows(args, pool, tokenizer, tasks, len(tasks), 0, held_out=True)
    subs = [pools[r["pool_name"]] for r in rows]
    if not shuffled:
        return subs, [r["prompt"] for r in rows]
    read = [subpools.shuffled_descriptions(sub, task["id"]) for sub, task in zip(subs, tasks, strict=True)]
    return subs, [policy_prompt(args, tokenizer, p, t) for p, t in zip(read, tasks, strict=True)]


def greedy_completions(
    args: argparse.Namespace, model: Any, tokenizer: Any, prompts: list[str]
) -> list[dict[str, Any]]:
    """The policy's greedy completion of each prompt, with the conductor's own token counts."""
    import torch

    done: list[dict[str, Any]] = []
    model.eval()
    for start in range(0, len(prompts), 16):
        batch = tokenizer(prompts[start : start + 16], return_tensors="pt", padding=True, padding_side="left").to(
            model.device
        )
        with torch.no_grad():
            out = model.generate(
                **batch, max_new_tokens=args.max_completion_length, do_sample=False, use_cache=True
            )  # trainers may have turned the cache off
        new = out[:, batch["input_ids"].shape[1] :]
        written = (new != tokenizer.pad_token_id).sum(dim=1).tolist()
        for text, n_in, n_out in zip(
            tokenizer.batch_decode(new, skip_special_tokens=True),
            batch["attention_mask"].sum(dim=1).tolist(),
            written,
            strict=True,
        ):
            done.append({"completion": text, "prompt_tokens": int(n_in), "completion_tokens": int(n_out)})
    model.train()
    return done


def held_out_workflows(
    args: argparse.Namespace, model: Any, tokenizer: Any, pool: Pool, tasks: list[dict[str, Any]], shuffled: bool
) -> tuple[list[Pool], list[dict[str, Any]]]:
    """The held-out tasks' sub-pools and, for each task, the policy's greedy workflow as OUT/held_out_<label>.jsonl
    keeps it: what it wrote, the workflow that runs, the conductor's token counts and the sub-pool's worker order
    (what the judge and tools/evaluate.py --workflows score it on)."""
    subs, prompts_read = evaluation_prompts(args, tokenizer, pool, tasks, shuffled)
    written = greedy_completions(args, model, tokenizer, prompts_read)
    rows = []
    for task, w, sub in zip(tasks, written, subs, strict=True):
        text = completion_text(args, w["completion"], sub, task)
        row = {"task_id": task["id"], **w, "written": w["completion"], "completion": text}
        rows.append(row | {"pool_workers": list(worker_order(sub))})
    return subs, rows


def write_rows(path: Path, rows: list[dict[str, Any]]) -> None:
    """A held-out file: one JSON row per task, in the tasks' order (the judge pairs strategies by task id)."""
    with path.open("w") as sink:
        sink.writelines(json.dumps(row) + "\n" for row in rows)


def evaluate_policy(
    args: argparse.Namespace,
    model: Any,
    tokenizer: Any,
    pool: Pool,
    tasks: list[dict[str, Any]],
    scorer: Scorer,
    label: str,
    shuffled: bool = False,
) -> dict[str, Any]:
    """Score the policy's greedy workflow for each held-out task: what it learned, without sampling luck.

    The completions go to OUT/held_out_<label>.jsonl, which tools/evaluate.py --workflows scores beside the baselines.
    `shuffled`: the policy reads each sub-pool with its workers' descriptions shuffled among them
    (subpools.shuffled_descriptions, seeded by the task id, as the judge's scripted ablation) and its workflow runs on
    the real sub-pool: a policy that reads the descriptions is misled, one that ignores them is not.
    """
    subs, rows = held_out_workflows(args, model, tokenizer, pool, tasks, shuffled)
    outcomes = scorer([r["completion"] for r in rows], tasks, subs)
    write_rows(args.out / f"held_out_{label}.jsonl", rows)
    by_domain: dict[str, list[bool]] = {}
    for task, outcome in zip(tasks, outcomes, strict=True):
        by_domain.setdefault(task.get("domain") or "all", []).append(outcome.correct)
    return {
        "tasks": len(tasks),
        "mean_reward": sum(o.reward for o in outcomes) / len(outcomes),
        "well_formed": sum(o.well_formed for o in outcomes) / len(outcomes),
        "accuracy": sum(o.correct for o in outcomes) / len(outcomes),
        "accuracy_by_domain": {d: sum(v) / len(v) for d, v in sorted(by_domain.items())},
        "steps_per_task": sum(o.steps for o in outcomes) / len(outcomes),
        "worker_tokens_per_task": sum(o.tokens for o in outcomes) / len(outcomes),
    }


def score_only_completions_on_cpu() -> None:
    """Make TRL's fused LM head project only the completion tokens on a CPU, as it does on Triton devices.

    Elsewhere TRL scores every position (static shapes for compilers such as Neuron's), which on a CPU pushes each
    prompt token through Gemma's 262k-token vocabulary: about 70% of a step. Compact scoring gives the same
    log-probabilities (the padded positions are masked out either way); the kernel itself keeps its torch path.
    """
    from trl.trainer import utils as trl_utils

    use_triton = getattr(trl_utils, "_use_triton", None)
    if use_triton is None:  # a TRL without the fused head: nothing to change
        return
    trl_utils._use_triton = lambda device: device.type == "cpu" or use_triton(device)


def grpo_config(args: argparse.Namespace, use_cpu: bool) -> Any:
    """TRL's GRPO configuration for these arguments (tools/paper_recipe.py checks it constructs)."""
    from trl import GRPOConfig

    return GRPOConfig(
        output_dir=str(args.out / "trainer"),
        max_steps=args.steps,
        learning_rate=args.lr,
        beta=args.beta,
        temperature=args.temperature,
        entropy_coef=args.entropy_coef,
        num_generations=args.group_size,
        per_device_train_batch_size=args.questions * args.group_size // args.grad_accum,
        gradient_accumulation_steps=args.grad_accum,  # one generation of questions x group per optimizer step
        max_completion_length=args.max_completion_length,
        logging_steps=1,
        save_strategy="steps",  # checkpoints a later session resumes from (learning/resume.py)
        save_steps=args.save_steps,
        save_total_limit=2,  # the newest complete one survives a kill while the next is written
        report_to="none",
        seed=args.seed,
        use_vllm=args.use_vllm,
        vllm_mode="colocate",
        shuffle_dataset=args.shuffle,
        use_cpu=use_cpu,
        bf16=False,
        disable_tqdm=True,
        # TRL turns it on by default; it drops the caches that share a group's prompt (learning/shared_prefix.py)
        gradient_checkpointing=args.gradient_checkpointing,
        mask_truncated_completions=args.mask_truncated,
        **dr_grpo_options(args),
    )


def dr_grpo_options(args: argparse.Namespace) -> dict[str, Any]:
    """The advantage scaling and loss type, only where given (else TRL's defaults): Dr. GRPO is
    `--scale-rewards none --loss-type dr_grpo`, no per-group division that turns a cent of cost into a full sign."""
    chosen = {"scale_rewards": args.scale_rewards, "loss_type": args.loss_type}
    return {name: value for name, value in chosen.items() if value is not None}


def _grpo_trainer(
    args: argparse.Namespace,
    policy: Any,
    reward: Any,
    rows: list[dict[str, Any]],
    tokenizer: Any,
    use_cpu: bool,
    session: resume.Session,
) -> Any:
    """TRL's GRPO trainer, each group's prompt computed once (learning/shared_prefix.py): a fresh LoRA on the base
    model, or the warm start's adapter continued."""
    from datasets import Dataset  # pyright: ignore[reportAttributeAccessIssue]  (Hugging Face's, not ours)
    from peft import LoraConfig

    from conductor_mcp.learning.shared_prefix import SharedPrefixGRPOTrainer

    lora = LoraConfig(r=args.lora_r, lora_alpha=args.lora_alpha, target_modules="all-linear", task_type="CAUSAL_LM")
    return SharedPrefixGRPOTrainer(
        model=policy,
        reward_funcs=[reward],
        args=grpo_config(args, use_cpu),
        train_dataset=Dataset.from_list(rows),
        processing_class=tokenizer,
        peft_config=None if args.sft_steps else lora,  # GRPO continues the SFT adapter
        callbacks=[session_end(session), *([time_limit(args.grpo_minutes)] if args.grpo_minutes else [])],
    )


def time_limit(minutes: float) -> Any:
    """A trainer callback that ends GRPO after the step that crosses `minutes` of wall time: on a shared machine a
    step takes what it takes, and the run must still end (and be evaluated) by its deadline."""
    from transformers import TrainerCallback

    class TimeLimit(TrainerCallback):
        def __init__(self) -> None:
            self.deadline = time.monotonic() + minutes * 60

        def on_step_end(self, args: Any, state: Any, control: Any, **_: Any) -> Any:
            if time.monotonic() >= self.deadline:
                control.should_training_stop = True
            return control

    return TimeLimit()


def session_end(session: resume.Session) -> Any:
    """A trainer callback that ends GRPO with a checkpoint after the step that crosses the session's end."""
    from transformers import TrainerCallback

    class SessionEnd(TrainerCallback):
        def on_step_end(self, args: Any, state: Any, control: Any, **_: Any) -> Any:
            if session.over():
                control.should_save = control.should_training_stop = True
            return control

    return SessionEnd()


def train(args: argparse.Namespace) -> dict[str, Any]:
    """Run (or resume, learning/resume.py) the phases: the base model's held-out evaluation, the warm start and its
    evaluation, GRPO, the trained policy's evaluations; then write the card."""
    tasks, held_out = training_tasks(args), held_out_tasks(args)
    problem = code_sandbox_problem(tasks + held_out, args.unsafe_local_exec)
    if problem:  # before anything is loaded, not after the first batch of rollouts
        raise RequestError(problem)
    from transformers import AutoModelForCausalLM, AutoTokenizer

    configure_logging("error")
    score_only_completions_on_cpu()
    session, progress = resume.Session(args.session_minutes), resume.Progress(args)
    pool = load_pool(args.pool, [builtin_pool_dir()])
    (args.out / "recipe.json").write_text(json.dumps(card.recipe(args), indent=2))  # judge_learning.py reads it
    tokenizer = AutoTokenizer.from_pretrained(args.base_model)
    use_cpu = not args.use_vllm and not _has_gpu()
    scorer = Scorer(args)

    def evaluate(label: str, model: Callable[[], Any], shuffled: bool = False) -> None:
        def work() -> dict[str, Any]:
            return evaluate_policy(args, model(), tokenizer, pool, held_out, scorer, label, shuffled)

        _phase(progress, session, f"eval_{label}", work)

    try:
        if held_out and not args.skip_base_eval:  # the untrained base model as the conductor
            evaluate("before", lambda: AutoModelForCausalLM.from_pretrained(args.base_model))
        policy: Any = args.base_model
        if args.sft_steps:  # imitate the sim conductor on every training task, not only GRPO's first rows
            policy = _warm_start(args, pool, tokenizer, tasks, use_cpu, progress, session)
            if held_out and args.eval_warm_start:
                evaluate("after_sft", lambda: policy)
        if progress.done("grpo"):
            trained = trained_adapter(args.base_model, args.out / "adapter")
        else:
            trained = _grpo(args, policy, pool, tokenizer, tasks, scorer, use_cpu, progress, session)
        if held_out:
            evaluate("after", lambda: trained)
            if args.eval_shuffled:
                evaluate("after_shuffled", lambda: trained, shuffled=True)
    finally:
        scorer.close()
    labels = ("before", "after_sft", "after", "after_shuffled")
    evaluation = {label: progress[f"eval_{label}"]["result"] for label in labels if progress.done(f"eval_{label}")}
    wall = {name: phase["wall_s"] for name, phase in progress.phases.items() if name != "grpo_earlier"}
    sft_losses = progress["sft"]["result"] if progress.done("sft") else []
    grpo = progress["grpo"]["result"]
    adapter = args.out / "adapter"
    return card.write_card(
        args, pool, adapter, grpo["curve"], grpo["losses"], evaluation, sft_losses, wall, grpo["rollouts"]
    )


def _phase(progress: resume.Progress, session: resume.Session, name: str, work: Callable[[], Any]) -> Any:
    """A phase's result: kept from an earlier session, or worked out now, kept, and the session's time checked."""
    if progress.done(name):
        return progress[name]["result"]
    started = time.monotonic()
    result = work()
    progress.record(name, {"result": result, "wall_s": time.monotonic() - started})
    session.check(name)
    return result


def trained_adapter(base_model: str, adapter: Path) -> Any:
    """The base model with an adapter a finished phase saved, trainable as it was when it was saved. Its config
    names the base model portably (`~/...`, card.name_base_model_portably); the loaded one names it as given."""
    from peft import PeftConfig, PeftModel
    from transformers import AutoModelForCausalLM

    config = PeftConfig.from_pretrained(str(adapter))
    config.base_model_name_or_path = base_model
    model = AutoModelForCausalLM.from_pretrained(base_model)
    return PeftModel.from_pretrained(model, str(adapter), is_trainable=True, config=config)


def _warm_start(
    args: argparse.Namespace,
    pool: Pool,
    tokenizer: Any,
    tasks: list[dict[str, Any]],
    use_cpu: bool,
    progress: resume.Progress,
    session: resume.Session,
) -> Any:
    """The warm-started policy: SFT on every training task, its adapter kept (the warm start alone is a servable
    conductor), or that adapter as an earlier session left it."""
    adapter = args.out / "sft-adapter"
    if progress.done("sft"):
        return trained_adapter(args.base_model, adapter)
    policy: Any = None

    def sft() -> list[float]:
        nonlocal policy
        sft_prompts, sft_pools = build_rows(args, pool, tokenizer, tasks, len(tasks), 0)
        pairs = warm_start.pairs(args, sft_prompts, sft_pools, tokenizer.eos_token)
        policy, losses = warm_start.warm_start(args, tokenizer, pairs, use_cpu)
        policy.save_pretrained(str(adapter))
        card.name_base_model_portably(adapter, args.base_model)
        return losses

    _phase(progress, session, "sft", sft)
    return policy


def _grpo(
    args: argparse.Namespace,
    policy: Any,
    pool: Pool,
    tokenizer: Any,
    tasks: list[dict[str, Any]],
    scorer: Scorer,
    use_cpu: bool,
    progress: resume.Progress,
    session: resume.Session,
) -> Any:
    """GRPO from its last checkpoint (or its start) to --steps; the trained model, its adapter saved. A session
    that ends first raises SessionEnded, its checkpoint written."""
    rows, pools = build_rows(
        args, pool, tokenizer, tasks, args.steps * args.questions, args.recursion_steps * args.questions
    )
    checkpoint, step = resume.last_checkpoint(args.out / "trainer")
    reward = RewardFunction(args, scorer, pools, resume.reward_log(args.out, step))
    trainer = _grpo_trainer(args, policy, reward, rows, tokenizer, use_cpu, session)
    started = time.monotonic()
    trainer.train(resume_from_checkpoint=str(checkpoint) if checkpoint else None)
    # GRPO's wall time over the sessions that ended by --session-minutes (one killed outright is not counted)
    wall_s = time.monotonic() - started + (progress["grpo_earlier"]["wall_s"] if progress.done("grpo_earlier") else 0)
    if trainer.state.global_step < args.steps and session.over():
        progress.record("grpo_earlier", {"result": trainer.state.global_step, "wall_s": wall_s})
        session.check(f"GRPO step {trainer.state.global_step} of {args.steps}")
    if "ref" in getattr(trainer.model, "peft_config", {}):  # TRL's frozen copy of the warm start, for --beta's KL
        trainer.model.delete_adapter("ref")  # not part of the conductor: saved, it was a second adapter beside it
    trainer.save_model(str(args.out / "adapter"))
    card.name_base_model_portably(args.out / "adapter", args.base_model)
    losses = [e["loss"] for e in trainer.state.log_history if "loss" in e]
    result = {"losses": losses, "curve": reward.curve, "rollouts": reward.rollouts}
    progress.record("grpo", {"result": result, "wall_s": wall_s})
    session.check("GRPO")
    return trainer.model


def _has_gpu() -> bool:
    import torch

    return bool(torch.cuda.is_available())
