// What the REAL Pi makes of a file whose lines nest very deeply: the values themselves are not
// printed (JSON.stringify overflows V8's stack on them), only what can be compared without them.
//
//   run.sh tests/interchange/deep_oracle.mjs FILE
//
// Prints {entryIds, leafId, branchIds, contextEntryIds, contextRoles, depths, stringifyErrors,
// listed} where depths[i] is the nesting depth of entry i (counted without recursion) and
// stringifyErrors names the entries JSON.stringify throws on.
import { copyFileSync, mkdtempSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { pathToFileURL } from "node:url";

const PKG = join(process.env.PI_ORACLE_DIR, "node_modules", "@earendil-works", "pi-coding-agent", "dist");
const { SessionManager } = await import(pathToFileURL(join(PKG, "core/session-manager.js")).href);

function depth(value) {
	let deepest = 0;
	const stack = [[value, 0]];
	while (stack.length) {
		const [item, level] = stack.pop();
		if (item === null || typeof item !== "object") continue;
		deepest = Math.max(deepest, level + 1);
		for (const child of Object.values(item)) stack.push([child, level + 1]);
	}
	return deepest;
}

const dir = mkdtempSync(join(tmpdir(), "deep-oracle-"));
const copy = join(dir, "session.jsonl");
copyFileSync(process.argv[2], copy);
const sm = SessionManager.open(copy, dir);
const entries = sm.getEntries();
const stringifyErrors = [];
for (const entry of entries) {
	try {
		JSON.stringify(entry);
	} catch (e) {
		stringifyErrors.push(`${entry.id}: ${e.name}`);
	}
}
const listed = (await SessionManager.list("/w", dir)).map((info) => info.messageCount);
process.stdout.write(`${JSON.stringify({
	entryIds: entries.map((e) => e.id),
	leafId: sm.getLeafId(),
	branchIds: sm.getBranch().map((e) => e.id),
	contextEntryIds: sm.buildContextEntries().map((e) => e.id),
	contextRoles: sm.buildSessionContext().messages.map((m) => m.role),
	depths: entries.map(depth),
	stringifyErrors,
	listed,
})}\n`);
