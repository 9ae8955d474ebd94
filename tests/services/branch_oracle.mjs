// Live oracle for branch summaries: what the REAL Pi's collectEntriesForBranchSummary and
// prepareBranchEntries give for pairs (old leaf, target) of one session file, as one JSON document.
//
//   run.sh tests/services/branch_oracle.mjs FILE BUDGET...
//
// Run through ../shared/oracle/run.sh (PI_ORACLE_DIR must point at the installed Pi 1.6.0).
import { copyFileSync, mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { pathToFileURL } from "node:url";

const PKG = join(process.env.PI_ORACLE_DIR, "node_modules", "@earendil-works", "pi-coding-agent", "dist");
const imp = (rel) => import(pathToFileURL(join(PKG, rel)).href);
const { SessionManager } = await imp("core/session-manager.js");
const { collectEntriesForBranchSummary, prepareBranchEntries } = await imp("core/compaction/branch-summarization.js");

const [file, ...budgets] = process.argv.slice(2);
const dir = mkdtempSync(join(tmpdir(), "branch-oracle-"));
const copy = join(dir, "session.jsonl");
copyFileSync(file, copy);
const out = { pairs: [] };
try {
	const sm = SessionManager.open(copy, dir);
	const entries = sm.getEntries();
	const ids = [...new Set(entries.map((e) => e?.id).filter((id) => typeof id === "string"))];
	const hasChild = new Set(entries.map((e) => e?.parentId));
	const leaves = ids.filter((id) => !hasChild.has(id));
	for (const old of leaves) {
		for (const target of ids) {
			const { entries: collected, commonAncestorId } = collectEntriesForBranchSummary(sm, old, target);
			const prepared = {};
			for (const budget of budgets) {
				try {
					const p = prepareBranchEntries(collected, Number(budget));
					prepared[budget] = {
						messages: p.messages,
						totalTokens: p.totalTokens,
						fileOps: { read: [...p.fileOps.read], edited: [...p.fileOps.edited], written: [...p.fileOps.written] },
					};
				} catch (e) {
					prepared[budget] = { $error: { name: e?.name ?? "Error", message: String(e?.message ?? e) } };
				}
			}
			out.pairs.push({ old, target, commonAncestorId, entryIds: collected.map((e) => e.id), prepared });
		}
	}
} catch (e) {
	out.error = { name: e?.name, message: String(e?.message ?? e) };
} finally {
	rmSync(dir, { recursive: true, force: true });
}
process.stdout.write(`${JSON.stringify(out)}\n`);
