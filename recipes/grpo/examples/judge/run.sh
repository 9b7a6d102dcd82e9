#!/usr/bin/env bash
# grpo trained by the next-turn judge, on SmolLM2 on the CPU: reef serves builtin:smollm2 with
# grpo and recipe.config.reward judge (reef.toml).  A simulated user (bench/cookbook_judge.py's)
# opens sessions and never scores anything: after each answer, their next message reacts to it
# ("Thanks!" when it opens with "Sure", "No. Start with Sure." otherwise).  Between steps reef has
# each answer judged by the message that followed it and stores the verdict as a report; groups
# of judged answers train LoRA steps, and the gate checks each before it becomes the next release.
#
# The judge is the served model unless JUDGE_URL names an OpenAI-compatible endpoint.  SmolLM2
# as its own judge is a weak one (it rejects a correction rather than calling it one) and a slow
# one: a verdict took it 5 s on two quiet cores, 40 s on busy ones, so the default 3 rounds (42
# sessions) take from about 5 minutes to half an hour; with a judge endpoint, 100 s.
#
#   recipes/grpo/examples/judge/run.sh                     # after scripts/setup.sh --dev
#   JUDGE_URL=http://127.0.0.1:11434/v1 JUDGE_MODEL=qwen3:8b recipes/grpo/examples/judge/run.sh
#   JUDGE_URL=https://api.openai.com/v1 JUDGE_MODEL=gpt-4o-mini JUDGE_API_KEY_ENV=OPENAI_API_KEY \
#     recipes/grpo/examples/judge/run.sh                   # the key is read from that variable
#   ROUNDS=6 REEF_PORT=8942 recipes/grpo/examples/judge/run.sh
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
. "$here/../../../examples.sh" # root, py, reef, example, serve_smollm2
example judged 8941 # bench/cookbook_judge.py's scenario
rounds="${ROUNDS:-3}"

judge=()
if [ -n "${JUDGE_URL:-}" ]; then
  judge=(--recipe.config.judge-url "$JUDGE_URL" --recipe.config.judge-model "${JUDGE_MODEL:-default}")
  [ -n "${JUDGE_API_KEY_ENV:-}" ] && judge+=(--recipe.config.judge-api-key-env "$JUDGE_API_KEY_ENV")
fi
echo "reef serves builtin:smollm2 with grpo, reward judge (judge: ${JUDGE_URL:-the served model}) at $url"
echo "state and log in $state"
serve_smollm2 "$port" "$state" "${judge[@]}"

# the simulated user: round 0 asks the two held-out requests 6 times each, then each round asks
# the training request 8 times and a held-out one twice, one session each; after a round it waits for the verdicts on its
# answers and for the step they start, if any (a person waits for a review; so does the CPU)
cd "$root"
"$py" - "$url" "$rounds" <<'PY'
import asyncio, sys
import httpx
from bench.cookbook_judge import HELD, SCENARIO, round_prompts, sessions

url, rounds = sys.argv[1], int(sys.argv[2])

async def learning(client):
    rows = (await client.get("/reef/status")).json()["scenarios"]
    return (rows[0].get("learning") or {}) if rows else {}

async def main():
    async with httpx.AsyncClient(base_url=url, headers={"x-reef-scenario": SCENARIO}, timeout=600) as client:
        asked = 0
        for n in range(rounds + 1):
            prompts = [HELD[0]] * 6 + [HELD[1]] * 6 if n == 0 else round_prompts(n)
            await sessions(client, prompts, n)
            asked += len(prompts)
            while True:
                now = await learning(client)
                recipe = now.get("recipe") or {}
                if now.get("state") != "stepping" and recipe.get("judged", 0) + recipe.get("judge_failures", 0) >= asked:
                    break
                await asyncio.sleep(0.5)
            await asyncio.sleep(1)  # a step the last verdicts start
            while (await learning(client)).get("state") == "stepping":
                await asyncio.sleep(0.5)
            tip = (await client.get(f"/reef/scenarios/{SCENARIO}/releases")).json()["releases"][0]["release"]
            print(f"round {n}: {len(prompts)} sessions, {recipe.get('judged', 0)} verdicts so far; {tip} serves", flush=True)

asyncio.run(main())
PY

echo
echo "the judge's verdicts, as reports on the data branch (the user wrote none):"
git -C "$repo" log --format='  %s' data | grep -F ' judge ' | head -n 8
echo "  ... $(git -C "$repo" log --format='%s' data | grep -cF ' judge ') verdicts in all"
echo
"$reef" releases "$scenario" --url "$url"
echo
echo "tags: $(git -C "$repo" tag --list | tr '\n' ' ')"
