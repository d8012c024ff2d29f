package cluster

// ReportKind names what one item of a batched agent report carries.
type ReportKind string

// The kinds of Report.
const (
	ReportPhase         ReportKind = "phase"
	ReportEvents        ReportKind = "events"
	ReportExit          ReportKind = "exit"
	ReportConfirmCancel ReportKind = "confirm_cancel"
)

// MaxReports is the most items one Reports may carry.
const MaxReports = 512

// Reports is the body of POST /v1/agent/reports: an agent's reports about
// the steps of its node, sent together. The leader checks each as the
// single-report routes do and logs them in order, in one or a few
// entries; each item gets its own result.
type Reports struct {
	Node    NodeID   `json:"node"`
	Reports []Report `json:"reports"`
}

// Report is one item of Reports: Kind names the one field set. An exit
// with a workspace result is not batched (it needs the blob store); send
// it to its own route.
type Report struct {
	Kind          ReportKind     `json:"kind"`
	Phase         *StepPhase     `json:"phase,omitempty"`
	Events        *StepEvents    `json:"events,omitempty"`
	Exit          *StepExit      `json:"exit,omitempty"`
	ConfirmCancel *ConfirmCancel `json:"confirm_cancel,omitempty"`
}

// ReportsResult is the answer to Reports: one result per item, in order,
// and the state index after them.
type ReportsResult struct {
	Results []ReportResult `json:"results"`
	Index   uint64         `json:"index"`
}

// ReportResult is the outcome of one report: no error, or the error the
// single-report route would have answered (its HTTP status and api error
// code).
type ReportResult struct {
	Error *ReportError `json:"error,omitempty"`
}

// ReportError is why one report was refused.
type ReportError struct {
	Status  int    `json:"status"`
	Code    string `json:"code"`
	Message string `json:"message"`
}
