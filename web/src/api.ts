// The gateway's /v1 JSON API (docs/GATEWAY.md) as the page uses it:
// same-origin fetch with the session cookie, X-CSRF-Token on every write.
// The interfaces and constants are the page's view of the Go types of
// package api: web's TestAPITypes checks every field against their JSON
// names (a field Go does not send, of another type, or required where Go
// may omit it fails), and the constants against Go's.

export interface Account {
  id: string;
  email: string;
  role: string;
  workspaces?: string[] | null;
  created_at?: string;
}

export interface Me {
  account?: Account;
  key?: { id: string; name: string };
  role: string;
  workspaces?: string[] | null;
  csrf_token?: string;
}

export interface SignInAnswer {
  account: Account;
  csrf_token: string;
}

/** Roles, least first (api.Role's names); each may do everything the ones before it may. */
export const ROLES = ["viewer", "editor", "admin", "owner"] as const;

/** Tenant is api.Tenant: an account (an organisation) the caller is a member of (GET /v1/accounts). */
export interface Tenant {
  id: string;
  name: string;
  created_at: string;
  role?: string;
  current?: boolean;
}

/** SwitchAccountRequest is the body of POST /v1/auth/switch. */
export interface SwitchAccountRequest {
  account: string;
}

/** CreateMemberRequest is the body of POST /v1/members (Account is the member answered). */
export interface CreateMemberRequest {
  email: string;
  password: string;
  role: string;
  workspaces: string[] | null;
}

/** UpdateMemberRequest is the body of PATCH /v1/members/{id}: the fields present are changed. */
export interface UpdateMemberRequest {
  role?: string | null;
  workspaces?: string[] | null;
}

/** Key is api.Key: an API key as the API shows it, never its secret. */
export interface Key {
  id: string;
  name: string;
  role: string;
  workspaces: string[] | null;
  created_at: string;
  last_used_at?: string;
}

/** CreateKeyRequest is the body of POST /v1/keys. */
export interface CreateKeyRequest {
  name: string;
  role: string;
  workspaces: string[] | null;
}

/** CreateKeyAnswer is the answer of POST /v1/keys: secret is the whole credential, shown once. */
export interface CreateKeyAnswer {
  key: Key;
  secret: string;
}

/** Secret is api.Secret: a secret's name, version and who set it when; never its value. */
export interface Secret {
  name: string;
  version: number;
  updated_by: { kind: string; id: string };
  updated_at: string;
  created_at: string;
}

/** PutSecretRequest is the body of PUT /v1/secrets/{name}. */
export interface PutSecretRequest {
  value: string;
}

/** AuditEntry is api.AuditEntry: one entry of GET /v1/audit; entry is an AuditDocument (or the scheduler's own). */
export interface AuditEntry {
  seq: number;
  time: string;
  entry: unknown;
}

/** AuditDocument is api.AuditDocument: who did what, with what result. */
export interface AuditDocument {
  who: string;
  role?: string;
  credential?: { kind: string; id?: string } | null;
  action: string;
  target?: string;
  result: string;
  client: string;
  workspace?: string;
  path?: string;
  revision?: string;
}

export interface Workspace {
  id: string;
  name: string;
  created_at: string;
}

/** Phase names in lifecycle order, as in a step's "phases". */
export const PHASES = ["queued", "placed", "created", "started", "first_output", "exited", "cleaned_up"] as const;
export type PhaseName = (typeof PHASES)[number];
export type Phases = Partial<Record<PhaseName, string>>;

export interface Cancel {
  requested_at?: string;
  confirmed_at?: string;
  unverified?: string;
}

/**
 * StepEvent is api.Event: a kind, a message the gateway writes for people
 * from the event's payload, and at most one payload, the kind's. The page
 * reads the payload, never the message.
 */
export interface StepEvent {
  time: string;
  kind: string;
  message: string;
  /** attempt is the attempt a placed or requeued event is about. */
  attempt?: number;
  egress?: EgressPayload | null;
  files?: FilesChanged | null;
  exit?: ExitPayload | null;
  output?: OutputPayload | null;
  waiting?: { reason: string } | null;
  unplaceable?: { resource: string } | null;
  warning?: { cause: string } | null;
}

/** EgressPayload is api.Egress: packets denied for one reason so far. */
export interface EgressPayload {
  reason: string;
  destination?: string;
  protocol?: string;
  packets: number;
}

/** ExitPayload is api.ExitEvent: how an attempt ended; cause is set when it failed. */
export interface ExitPayload {
  state: string;
  exit_code: number;
  terminated_by: string;
  cause?: string;
}

/** OutputPayload is api.Output: what the log kept of output past its cap. */
export interface OutputPayload {
  dropped_bytes?: number;
  head_bytes: number;
  tail_bytes: number;
  cap_bytes: number;
}

/** FilesChanged is what a step (or a run's steps together) changed in the workspace; directories end in "/". */
export interface FilesChanged {
  added?: string[] | null;
  modified?: string[] | null;
  removed?: string[] | null;
  /** more counts the changed paths not named. */
  more?: number;
}

export interface RunStep {
  id: string;
  index: number;
  args: string[];
  state: string;
  exit_code?: number | null;
  terminated_by?: string;
  phases?: Phases;
  cancel?: Cancel | null;
  events?: StepEvent[] | null;
  /** events_omitted counts older events an ended step no longer keeps. */
  events_omitted?: number;
  denied?: Record<string, number> | null;
  files_changed?: FilesChanged | null;
  retry?: string;
  cleanup?: string;
  reason?: string;
  /** cause is the typed cause of a step that failed on its node (api.Cause*). */
  cause?: string;
  tty?: boolean;
  image?: string;
  /** revision is the workspace revision the step made (detached when it conflicted). */
  revision?: string;
  /** tool is set on a step of an agent run: the tool call it is (a Bash step is also a script step). */
  tool?: ToolStep | null;
}

export interface Operation {
  id: string;
  workspace: string;
  session?: string;
  state: string;
  created_by?: { kind: string; id: string };
  created_at: string;
  ended_at?: string;
  steps: RunStep[];
  errors?: string[] | null;
  cancel?: Cancel | null;
  files_changed?: FilesChanged | null;
  /** agent is set on an agent run: its agent file and what its grant holds. */
  agent?: RunAgent | null;
  /** refusals counts the run's refused tool calls. */
  refusals?: number;
  /** awaiting is the proposal a run awaiting approval waits on. */
  awaiting?: Proposal | null;
}

/** Tool names as agent files list them (api.Tools, in the docs' order). */
export const TOOLS = ["Read", "Glob", "Grep", "Write", "Edit", "Bash", "ProposeChange", "ApplyChange"] as const;
/** TOOL_BASH is the tool whose steps are script steps, with output to stream (api.ToolBash). */
export const TOOL_BASH = "Bash";

/** The state of a live run paused at a gate (api.RunAwaitingApproval). */
export const RUN_AWAITING_APPROVAL = "awaiting_approval";

/** Tool-call step states besides a script step's (api.StepDone, api.StepRefused, api.StepAwaitingApproval). */
export const STEP_DONE = "done";
export const STEP_REFUSED = "refused";
export const STEP_AWAITING_APPROVAL = "awaiting_approval";

/** Proposal states (api.Proposal*). */
export const PROPOSAL_PROPOSED = "proposed";
export const PROPOSAL_APPROVED = "approved";
export const PROPOSAL_APPLIED = "applied";
export const PROPOSAL_REJECTED = "rejected";

/** RunAgent is api.RunAgent: the agent file an agent run was made from (at revision) and what its grant holds. */
export interface RunAgent {
  name: string;
  path: string;
  revision: string;
  sha256: string;
  tools: string[] | null;
  secrets: string[] | null;
  network: string;
  image: string;
  limits: AgentLimits;
  gates: string[] | null;
  grant_expires: string;
}

/** AgentLimits is api.AgentLimits: each Bash step's limits and the run's lifetime (durations as "10m"). */
export interface AgentLimits {
  cpu: number;
  memory: string;
  timeout: string;
  pids: number;
  workspace: string;
  run: string;
}

/** Refusal is api.Refusal: why a tool call was refused, and the path it probably meant. */
export interface Refusal {
  reason: string;
  message: string;
  path?: string;
  did_you_mean?: string;
}

/** ToolStep is api.ToolStep: what a tool-call step adds to its RunStep. */
export interface ToolStep {
  name: string;
  input_sha256: string;
  /** input is a short account of the call's input (the path, the pattern, the command). */
  input?: string;
  summary?: string;
  refusal?: Refusal | null;
  proposal?: string;
  read?: string;
}

/** ProposedFile is one file of a proposal: its new content, or delete. */
export interface ProposedFile {
  path: string;
  content?: string;
  delete?: boolean;
}

/** Proposal is api.Proposal: a change a ProposeChange recorded, and what became of it. */
export interface Proposal {
  id: string;
  run: string;
  step: string;
  base: string;
  state: string;
  sha256: string;
  message?: string;
  files: ProposedFile[] | null;
  diff: string;
  approved_by?: { kind: string; id: string } | null;
  approved_at?: string;
  expires?: string;
  for_step?: number;
  rejected_by?: { kind: string; id: string } | null;
  reason?: string;
  applied?: string;
  applied_by?: string;
}

/** ApproveRequest is the body of POST /v1/runs/{id}/approve and /reject (reason only for a reject). */
export interface ApproveRequest {
  proposal: string;
  reason?: string;
}

/** RunEvent is api.RunEvent: one entry of GET /v1/runs/{id}/events, oldest first. */
export interface RunEvent {
  seq: number;
  kind: string;
  time: string;
  step?: string;
  step_index?: number | null;
  tool?: string;
  input_sha256?: string;
  summary?: string;
  refusal?: Refusal | null;
  proposal?: string;
  by?: { kind: string; id: string } | null;
  revision?: string;
  parent?: string;
  changes?: EventChange[] | null;
  state?: string;
  exit_code?: number | null;
}

/** EventChange is api.EventChange: one path a revision changed. */
export interface EventChange {
  path: string;
  type?: string;
  sha256?: string;
  size?: number;
  mode?: number;
  target?: string;
  deleted?: boolean;
}

/** Author kinds of a revision (api.Author*): a person, an API key, or a step. */
export const AUTHOR_ACCOUNT = "account";
export const AUTHOR_KEY = "key";
export const AUTHOR_STEP = "step";

/** Author is who made a revision. */
export interface Author {
  kind: string;
  id: string;
}

/**
 * Revision is one revision of a workspace (SPEC.md, "Workspaces and
 * revisions"). number is 0 for a detached revision (a writer's tree
 * refused as a conflict, conflict naming the paths).
 */
export interface Revision {
  id: string;
  workspace: string;
  number: number;
  parent?: string;
  author: Author;
  created_at: string;
  message?: string;
  changes: FilesChanged;
  manifest: string;
  files: number;
  bytes: number;
  detached?: boolean;
  conflict?: string[];
  /** step and run: the step that made it, and its run. */
  step?: string;
  run?: string;
}

/** TreeEntry is one path of a revision's tree; a directory is listed only when empty. */
export interface TreeEntry {
  path: string;
  type: "file" | "dir" | "symlink" | string;
  size?: number;
  sha256?: string;
  mode: number;
  target?: string;
}

/** WorkspaceDiff is what changed from one revision to another, with a unified diff per text file. */
export interface WorkspaceDiff {
  from: string;
  to: string;
  changes: FilesChanged;
  text: FileDiff[] | null;
}

export interface FileDiff {
  path: string;
  diff: string;
  truncated?: boolean;
}

export interface RestoreRequest {
  rev: string;
  message?: string;
}

export interface UploadRequest {
  files: UploadFile[] | null;
  delete?: string[];
  parent?: string;
  message?: string;
  commit?: boolean;
}

export interface UploadFile {
  path: string;
  sha256: string;
  size: number;
  mode?: number;
}

export interface UploadResponse {
  urls: Record<string, string> | null;
  expires: string;
  revision?: Revision;
}

export interface StepSpec {
  args: string[];
  image: "base" | "python";
  env?: string[];
  no_internet?: boolean;
  tty?: boolean;
}

/** The run state until a run ends (api.RunRunning). */
export const RUN_RUNNING = "running";

/** Step states that are final (SPEC.md, "Steps"; api.TerminalState). */
export const STEP_ENDED = ["exited", "failed", "cancelled", "lost", "expired"] as const;

/** Close codes of a step stream the gateway's re-check refused (api.CloseUnauthorized, api.CloseForbidden). */
export const CLOSE_UNAUTHORIZED = 4401;
export const CLOSE_FORBIDDEN = 4403;

/** Run states that are final: a run awaiting approval is live. */
export function runEnded(op: Operation): boolean {
  return op.state !== RUN_RUNNING && op.state !== RUN_AWAITING_APPROVAL;
}

/** Step states that are final, a tool-call step's (done, refused) included. */
export function stepEnded(state: string): boolean {
  return (STEP_ENDED as readonly string[]).includes(state) || state === STEP_DONE || state === STEP_REFUSED;
}

/** ApiError is an answer other than 2xx, carrying the api.Error code and message. */
export class ApiError extends Error {
  constructor(
    readonly status: number,
    readonly code: string,
    message: string,
    /** answer is the decoded JSON of the answer, when it was JSON. */
    readonly answer?: unknown,
  ) {
    super(message);
    this.name = "ApiError";
  }
}

let csrfToken = "";
let onUnauthorized: (() => void) | undefined;

/** setCsrfToken remembers the token sent with every write. */
export function setCsrfToken(token: string | undefined): void {
  csrfToken = token ?? "";
}

/** setUnauthorizedHandler is called when an answer says the session is gone (401). */
export function setUnauthorizedHandler(fn: () => void): void {
  onUnauthorized = fn;
}

/**
 * call sends one request and returns the decoded JSON answer (undefined for
 * 204). Errors are ApiError with the server's message, or a network error
 * rewritten to say what to check.
 */
export async function call<T>(method: string, path: string, body?: unknown): Promise<T> {
  return (await request<T>(method, path, body)).data;
}

/**
 * sendBytes sends a raw body (a file the person dropped, streamed by the
 * browser) with extra headers, and returns the decoded JSON answer, as
 * call does.
 */
export async function sendBytes<T>(method: string, path: string, body: Blob, headers: Record<string, string>): Promise<T> {
  return (await request<T>(method, path, undefined, { body, headers })).data;
}

/**
 * callPages reads a paginated list (docs/GATEWAY.md, "Lists"): it follows
 * the X-Next-Cursor header of each page until there is none, `want` items
 * are read, or `maxPages` pages were. A filtered page may hold fewer items
 * than its limit, even none, and still have a next cursor.
 */
export async function callPages<T>(path: string, opts: { want?: number; maxPages?: number } = {}): Promise<T[]> {
  const want = opts.want ?? Infinity;
  const maxPages = opts.maxPages ?? 10;
  const out: T[] = [];
  let cursor = "";
  for (let page = 0; page < maxPages; page++) {
    const sep = path.includes("?") ? "&" : "?";
    const { data, next } = await request<T[] | null>("GET", cursor ? `${path}${sep}cursor=${encodeURIComponent(cursor)}` : path);
    out.push(...(data ?? []));
    if (!next || out.length >= want) break;
    cursor = next;
  }
  return out;
}

/** callPage reads one page of a paginated list: its items and the cursor of the next page ("" when none). */
export async function callPage<T>(path: string): Promise<{ items: T[]; next: string }> {
  const { data, next } = await request<T[] | null>("GET", path);
  return { items: data ?? [], next };
}

async function request<T>(
  method: string,
  path: string,
  body?: unknown,
  raw?: { body: Blob; headers: Record<string, string> },
): Promise<{ data: T; next: string }> {
  const headers: Record<string, string> = { Accept: "application/json", ...raw?.headers };
  if (body !== undefined) headers["Content-Type"] = "application/json";
  else if (raw && !headers["Content-Type"]) headers["Content-Type"] = "application/octet-stream";
  if (method !== "GET" && method !== "HEAD" && csrfToken) headers["X-CSRF-Token"] = csrfToken;
  let res: Response;
  try {
    res = await fetch(path, {
      method,
      headers,
      credentials: "same-origin",
      cache: "no-store",
      body: raw ? raw.body : body === undefined ? undefined : JSON.stringify(body),
    });
  } catch (err) {
    throw new ApiError(0, "unreachable", `cannot reach the gateway (${String(err)}); check that it is running`);
  }
  if (res.status === 204) return { data: undefined as T, next: "" };
  const text = await res.text();
  let data: unknown;
  try {
    data = text ? JSON.parse(text) : undefined;
  } catch {
    data = undefined;
  }
  if (!res.ok) {
    const e = (data as { error?: { code?: string; message?: string } } | undefined)?.error;
    let message = e?.message || `${res.status} ${res.statusText}`.trim();
    const retry = res.headers.get("Retry-After");
    if (res.status === 429 && retry && !/retry/i.test(message)) message += ` (retry in ${retry}s)`;
    const err = new ApiError(res.status, e?.code || "http_" + res.status, message, data);
    if (res.status === 401 && path !== "/v1/auth/signin" && onUnauthorized) onUnauthorized();
    throw err;
  }
  if (data === undefined && text) throw new ApiError(res.status, "bad_answer", `${method} ${path}: answer is not JSON`);
  return { data: data as T, next: res.headers.get("X-Next-Cursor") ?? "" };
}

/** errorText is the message to show for any thrown value. */
export function errorText(err: unknown): string {
  if (err instanceof Error) return err.message;
  return String(err);
}
