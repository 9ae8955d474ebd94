// Live oracle for usage statistics: what the REAL Pi's AgentSession.getSessionStats (the numbers
// `/session` prints) gives for each session file, as one JSON document {file: stats | {throws}}.
//
//   run.sh tests/analysis/stats_oracle.mjs FILE...
//
// Pi's own method runs with a minimal `this` (the session manager of the opened file, no model):
// constructing a whole AgentSession needs a model registry and settings that stats never read.
import { copyFileSync, mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { basename, join } from "node:path";
import { pathToFileURL } from "node:url";

const PKG = join(process.env.PI_ORACLE_DIR, "node_modules", "@earendil-works", "pi-coding-agent", "dist");
const imp = (rel) => import(pathToFileURL(join(PKG, rel)).href);
const { SessionManager } = await imp("core/session-manager.js");
const { AgentSession } = await imp("core/agent-session.js");

const out = {};
for (const file of process.argv.slice(2)) {
	const dir = mkdtempSync(join(tmpdir(), "stats-oracle-"));
	const copy = join(dir, basename(file));
	copyFileSync(file, copy);
	try {
		const sessionManager = SessionManager.open(copy, dir);
		const self = { sessionManager, sessionFile: copy, sessionId: sessionManager.getSessionId(), getContextUsage: () => undefined };
		const { userMessages, assistantMessages, toolCalls, toolResults, totalMessages, tokens, cost } =
			AgentSession.prototype.getSessionStats.call(self);
		out[file] = { userMessages, assistantMessages, toolCalls, toolResults, totalMessages, tokens, cost };
	} catch (e) {
		out[file] = { throws: `${e?.constructor?.name}: ${e?.message}` };
	} finally {
		rmSync(dir, { recursive: true, force: true });
	}
}
process.stdout.write(JSON.stringify(out));
