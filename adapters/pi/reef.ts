/**
 * reef's own pi extension. reef renders it into every pi agent dir it writes, as
 * extensions/reef.ts; names starting with "reef" are reserved, so no release can change it.
 *
 *   /evolve <text>              file an ask: what the agent should do differently (no model call)
 *   /versions                   published releases and pending ones, with installed/current marks
 *   /versions <vN|cN>           the link to that release's (or step's) page
 *   /versions <vN|cN> install   install it; a pending cN is promoted first, once you confirm
 *   /good [text], /bad [text]   a report with score 1 (or 0) on this session's receipts (no model call)
 *   /feedback <text>            a report with that feedback on this session's receipts
 *   session start               a notice when reef has a newer release than the installed one
 *
 * It talks to reef only in a pi that reef-pi started (reef-pi exports REEF_URL, REEF_SCENARIO,
 * REEF_TOKEN, REEF_PI_LAUNCHER and REEF_RUN_TAG, the run's id that pi sends with every model call:
 * "this session's receipts" are the records tagged run:<REEF_RUN_TAG>). Anywhere else (reefine's
 * health check, a plain pi) the commands say how to start pi through reef and the session start
 * is silent. The daemon screens feedback as it screens asks. Nothing here throws into pi: a daemon
 * that is down or slow costs one line after at most a few seconds, never the session. In print
 * mode pi sends what an extension writes to stdout to stderr.
 */
import type { ExtensionAPI } from "@mariozechner/pi-coding-agent";
import { readFileSync } from "node:fs";
import { userInfo } from "node:os";
import { dirname, join } from "node:path";

const NOTICE_TIMEOUT_MS = 2000;
const CALL_TIMEOUT_MS = 15000;
const INSTALL_TIMEOUT_MS = 300000;
const ASK_WIDTH = 60;
const CLOCK_SLACK_MS = 10000; // records of this run are searched from this long before pi started
const PAGE = 1000;
// the process's start, not this module's load: /reload loads the module again in the same run
const STARTED_MS = Date.now() - Math.round(process.uptime() * 1000);

type Level = "info" | "warning" | "error";
type Installed = { release: string | null; commit: string | null };
type Row = { version: string; id: string; result: string; marks: string; ask: string };

class ReefError extends Error {}

function settings() {
  return {
    url: (process.env.REEF_URL ?? "").replace(/\/+$/, ""),
    scenario: process.env.REEF_SCENARIO ?? "",
    token: process.env.REEF_TOKEN ?? "",
    launcher: process.env.REEF_PI_LAUNCHER ?? "",
    run: process.env.REEF_RUN_TAG ?? "",
    agent: process.env.PI_CODING_AGENT_DIR ?? "",
  };
}

function routed(): boolean {
  const s = settings();
  return s.url !== "" && s.scenario !== "";
}

function show(ctx: any, text: string, level: Level = "info"): void {
  try {
    if (ctx.hasUI) ctx.ui.notify(text, level);
    else process.stdout.write(text + "\n");
  } catch {
    // showing is best effort: a notice must never break the session
  }
}

function installed(): Installed {
  try {
    const s = settings();
    const sidecar = JSON.parse(readFileSync(join(dirname(s.agent), "installed.json"), "utf8"));
    return { release: sidecar.release ?? null, commit: sidecar.commit ?? null };
  } catch {
    return { release: null, commit: null };
  }
}

async function call(path: string, init: { method?: string; body?: unknown } = {}, timeoutMs = CALL_TIMEOUT_MS) {
  const s = settings();
  const headers: Record<string, string> = { "x-reef-scenario": s.scenario, accept: "application/json" };
  if (s.token) headers.authorization = `Bearer ${s.token}`;
  if (init.body !== undefined) headers["content-type"] = "application/json";
  let response: Response;
  try {
    response = await fetch(s.url + path, {
      method: init.method ?? "GET",
      headers,
      body: init.body === undefined ? undefined : JSON.stringify(init.body),
      signal: AbortSignal.timeout(timeoutMs),
    });
  } catch (error: any) {
    const why =
      error?.name === "TimeoutError"
        ? `no answer within ${timeoutMs / 1000}s`
        : String(error?.cause?.code ?? error?.cause?.message ?? error?.message ?? error);
    throw new ReefError(`reef at ${s.url} is not reachable (${why})`);
  }
  const text = await response.text();
  let body: any = null;
  try {
    body = JSON.parse(text);
  } catch {
    body = null;
  }
  if (!response.ok) {
    throw new ReefError(body?.error?.message ?? `reef answered ${response.status} ${response.statusText}`);
  }
  return body;
}

function releasesPath(): string {
  return `/reef/scenarios/${encodeURIComponent(settings().scenario)}/releases`;
}

function releaseNumber(name: string | null): number {
  const match = /^v(\d+)$/.exec(name ?? "");
  return match ? Number(match[1]) : 0;
}

function oneLine(text: string | null | undefined, width = ASK_WIDTH): string {
  const flat = (text ?? "").split(/\s+/).join(" ").trim();
  return flat.length <= width ? flat : flat.slice(0, width - 1) + "…";
}

function result(row: any): string {
  if (row.operation === "evolve") return (row.verdict ?? "").split(":")[0] || "selected";
  if (row.operation === "promote") return "approved";
  return row.operation ?? "";
}

function rows(listing: any, mine: Installed): Row[] {
  const pending: Row[] = (listing.steps ?? [])
    .filter((step: any) => step.pending)
    .sort((a: any, b: any) => b.step - a.step)
    .map((step: any) => ({
      version: step.name,
      id: "-",
      result: "pending",
      marks: `needs approval${step.base ? ", on " + step.base : ""}`,
      ask: oneLine(step.ask),
    }));
  const published: Row[] = (listing.releases ?? []).map((release: any) => {
    const marks: string[] = [];
    if (mine.commit !== null && release.commit === mine.commit && release.release === mine.release) marks.push("installed");
    if (release.current) marks.push("current");
    return {
      version: release.release,
      id: String(release.commit ?? "").slice(0, 7),
      result: result(release),
      marks: marks.join(", "),
      ask: oneLine(release.ask),
    };
  });
  return [...pending, ...published];
}

function table(all: Row[]): string {
  const header: Row = { version: "version", id: "id", result: "result", marks: "installed/current", ask: "ask" };
  const keys: (keyof Row)[] = ["version", "id", "result", "marks", "ask"];
  const widths = keys.map((key) => Math.max(...[header, ...all].map((row) => row[key].length)));
  const line = (row: Row) =>
    keys
      .map((key, i) => (i === keys.length - 1 ? row[key] : row[key].padEnd(widths[i])))
      .join("  ")
      .trimEnd();
  return [line(header), ...all.map(line)].join("\n");
}

function page(listing: any, name: string): string | null {
  const s = settings();
  const release = (listing.releases ?? []).find((row: any) => row.release === name);
  const step = (listing.steps ?? []).find((row: any) => row.name === name);
  const path = release?.page_path ?? step?.page_path;
  return path ? s.url + path : null;
}

/** The files a pending step adds or changes that run code, as the listing names them
 * ("extensions/hello.ts (new)"); null when reef could not tell (or an older reef did not say). */
function executable(step: any): string[] | null {
  return Array.isArray(step.executable) ? step.executable.map(String) : null;
}

/** "Approve c2 of dev? It runs extensions/hello.ts with your privileges." (as `reef promote` asks) */
function approvalQuestion(name: string, code: string[] | null): string {
  const question = `Approve ${name} of ${settings().scenario}?`;
  if (code === null) return `${question} It changes code that runs on this machine.`;
  const running = code.filter((line) => !line.endsWith("(removed)")).map((line) => line.split(" (")[0]);
  if (running.length > 0) {
    const more = running.length > 1 ? ` and ${running.length - 1} more` : "";
    return `${question} It runs ${running[0]}${more} with your privileges.`;
  }
  return code.length > 0 ? `${question} It removes code from the harness.` : question;
}

function codeNotice(code: string[] | null): string {
  if (code === null) return "reef could not tell which of its files run code: read its page before approving.";
  if (code.length === 0) return "";
  return "pi runs this code with your privileges:\n" + code.map((line) => `  ${line}`).join("\n");
}

/** Who approves from this pi, as the release records it. */
function approver(): string {
  let user = "";
  try {
    user = userInfo().username;
  } catch {
    // no passwd entry (some containers): the uid still says who
  }
  return `${user || `uid ${process.getuid?.() ?? "?"}`} via pi /versions`;
}

async function notice(ctx: any): Promise<void> {
  const mine = installed();
  const listing = await call(releasesPath(), {}, NOTICE_TIMEOUT_MS);
  const newer = (listing.releases ?? []).filter((row: any) => row.number > releaseNumber(mine.release));
  const waiting = (listing.steps ?? []).filter((step: any) => step.pending).map((step: any) => step.name);
  const lines: string[] = [];
  if (newer.length > 0) {
    const latest = newer[0];
    lines.push(
      `reef: ${latest.release} is available (installed: ${mine.release ?? "none"}): "${oneLine(latest.ask)}"`,
      `  install it with /versions ${latest.release} install, or reef-pi update`,
    );
  }
  if (waiting.length > 0) {
    lines.push(`reef: ${waiting.join(", ")} ${waiting.length === 1 ? "waits" : "wait"} for approval: see /versions`);
  }
  if (ctx.hasUI) {
    const label = newer.length > 0 ? `reef ${mine.release ?? "-"} → ${newer[0].release}` : `reef ${mine.release ?? "-"}`;
    ctx.ui.setStatus("reef", label);
  }
  if (lines.length > 0) show(ctx, lines.join("\n"), "info");
}

async function install(pi: ExtensionAPI, ctx: any, name: string): Promise<void> {
  const s = settings();
  if (!s.launcher) {
    show(ctx, `reef: this pi was not started by reef-pi; install with: reef-pi update --release ${name}`, "warning");
    return;
  }
  show(ctx, `reef: installing ${name}…`);
  const run = await pi.exec(s.launcher, ["update", "--release", name], { timeout: INSTALL_TIMEOUT_MS });
  if (run.code !== 0) {
    const said = (run.stderr || run.stdout).trim().split("\n").slice(-3).join("\n");
    show(ctx, `reef: installing ${name} failed (exit ${run.code}):\n${said}`, "error");
    return;
  }
  show(ctx, `reef: installed ${name}. Type /reload to load it into this session.`);
}

async function versions(pi: ExtensionAPI, args: string, ctx: any): Promise<void> {
  const [name, action, ...rest] = args.trim().split(/\s+/).filter((word) => word !== "");
  const listing = await call(releasesPath());
  const mine = installed();
  if (!name) {
    const all = rows(listing, mine);
    if (all.length === 0) {
      show(ctx, `reef: scenario ${settings().scenario} has no releases yet; ask for one with /evolve <what to change>`);
      return;
    }
    show(ctx, table(all));
    return;
  }
  const link = page(listing, name);
  if (link === null) {
    show(ctx, `reef: no release or pending step ${name} in scenario ${settings().scenario}: see /versions`, "warning");
    return;
  }
  if (!action) {
    show(ctx, `reef: ${name}: ${link}`);
    return;
  }
  if (action !== "install" || rest.length > 0) {
    show(ctx, `reef: usage: /versions [vN|cN [install]]`, "warning");
    return;
  }
  const step = (listing.steps ?? []).find((row: any) => row.name === name);
  if (step === undefined) {
    await install(pi, ctx, name);
    return;
  }
  if (step.release) {
    await install(pi, ctx, step.release);
    return;
  }
  if (!step.pending) {
    show(ctx, `reef: ${name} was not selected (${step.verdict}) and cannot be installed; see ${link}`, "warning");
    return;
  }
  const promote = `reef promote ${settings().scenario} ${name}`;
  const code = executable(step);
  const runs = codeNotice(code);
  if (!ctx.hasUI) {
    show(
      ctx,
      `reef: ${name} changes code that runs on this machine and needs a person's approval, which print mode ` +
        `cannot ask for.${runs ? "\n" + runs : ""}\nRead ${link}, then approve it with:\n  ${promote}\n` +
        `and install it with: reef-pi update`,
      "warning",
    );
    return;
  }
  const approved = await ctx.ui.confirm(
    approvalQuestion(name, code),
    `"${oneLine(step.ask, 200)}"\n${runs ? runs + "\n" : ""}` +
      `See ${link}. Promote it to a release and install it?`,
  );
  if (!approved) {
    show(ctx, `reef: ${name} stays pending; nothing was changed.`);
    return;
  }
  const promoted = await call(`/reef/scenarios/${encodeURIComponent(settings().scenario)}/promote`, {
    method: "POST",
    body: { release: name, approved_by: approver() },
  });
  show(ctx, `reef: ${name} is now ${promoted.release}.`);
  await install(pi, ctx, promoted.release);
}

async function evolve(args: string, ctx: any): Promise<void> {
  const text = args.trim();
  if (!text) {
    show(ctx, "reef: usage: /evolve <what the agent should do differently>", "warning");
    return;
  }
  const body: Record<string, string> = { text, harness: "pi" };
  const mine = installed();
  if (mine.release) body.release_id = mine.release;
  try {
    const session = ctx.sessionManager?.getSessionId?.();
    if (typeof session === "string" && session) body.session = session;
  } catch {
    // the session id is a courtesy for the audit trail
  }
  const filed = await call("/reef/train", { method: "POST", body });
  show(
    ctx,
    `reef: ask ${filed.agent_record_id} filed for scenario ${filed.scenario}.\n` +
      `  progress: ${settings().url}${filed.page_path}\n` +
      `  when it settles, /versions shows the result`,
  );
}

/** The first record id of this run, at the latest: ids are time-ordered (rec_<12 hex ms><16 hex>),
 * as reef-pi report's cursor; the slack covers clocks that differ between pi and the daemon. */
function runCursor(): string {
  const ms = Math.max(0, STARTED_MS - CLOCK_SLACK_MS);
  return `rec_${ms.toString(16).padStart(12, "0")}${"0".repeat(16)}`;
}

async function receipts(): Promise<string[]> {
  const s = settings();
  const found: string[] = [];
  let after: string | null = runCursor();
  while (after) {
    const query = new URLSearchParams({ tag: `run:${s.run}`, after, limit: String(PAGE) });
    const listing = await call(`/reef/scenarios/${encodeURIComponent(s.scenario)}/records?${query}`);
    found.push(...(listing.records ?? []).map((record: any) => String(record.id)));
    after = listing.next ?? null;
  }
  return found;
}

type Verdict = "good" | "bad" | "feedback";

async function report(command: Verdict, args: string, ctx: any): Promise<void> {
  const text = args.trim();
  if (command === "feedback" && !text) {
    show(ctx, "reef: usage: /feedback <what was good or bad in this session>", "warning");
    return;
  }
  const s = settings();
  if (!s.run) {
    show(ctx, "reef: this pi has no run tag (REEF_RUN_TAG) to find its receipts by: start it with reef-pi", "warning");
    return;
  }
  const references = await receipts();
  if (references.length === 0) {
    show(ctx, "reef: nothing to report on yet: this session has not reached the model through reef", "warning");
    return;
  }
  const body: Record<string, unknown> = {
    references,
    metadata: { harness: "pi", session: s.run, source: "user", command },
  };
  if (command !== "feedback") body.score = command === "good" ? 1 : 0;
  if (text) body.feedback = text;
  const made = await call("/reef/report", { method: "POST", body });
  const what = command === "feedback" ? "feedback" : `/${command}`;
  const plural = references.length === 1 ? "" : "s";
  show(ctx, `reef: ${what} noted as ${made.agent_record_id} on ${references.length} receipt${plural} of this session`);
}

function guarded(run: (args: string, ctx: any) => Promise<void>) {
  return async (args: string, ctx: any) => {
    if (!routed()) {
      show(ctx, "reef: this pi was not started through reef: run it with reef-pi", "warning");
      return;
    }
    try {
      await run(args ?? "", ctx);
    } catch (error: any) {
      show(ctx, `reef: ${error instanceof ReefError ? error.message : String(error?.message ?? error)}`, "error");
    }
  };
}

export default function (pi: ExtensionAPI) {
  pi.registerCommand("evolve", {
    description: "Ask reef to change this harness: /evolve <what the agent should do differently>",
    handler: guarded(evolve),
  });
  pi.registerCommand("versions", {
    description: "reef releases: /versions, /versions vN (its page), /versions vN install",
    handler: guarded((args, ctx) => versions(pi, args, ctx)),
  });
  pi.registerCommand("good", {
    description: "Tell reef this session went well (score 1): /good [why]",
    handler: guarded((args, ctx) => report("good", args, ctx)),
  });
  pi.registerCommand("bad", {
    description: "Tell reef this session went badly (score 0): /bad [why]",
    handler: guarded((args, ctx) => report("bad", args, ctx)),
  });
  pi.registerCommand("feedback", {
    description: "Tell reef what was good or bad in this session: /feedback <text>",
    handler: guarded((args, ctx) => report("feedback", args, ctx)),
  });
  pi.on("session_start", async (event, ctx) => {
    if (!routed() || !["startup", "new", "reload"].includes(event.reason)) return;
    try {
      await notice(ctx);
    } catch {
      // no notice is better than a failed session: the daemon may be down or slow
    }
  });
}
