package v1alpha1

import (
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// EvalRun is a run file applied to the cluster: the operator submits its
// spec to an evalsid server and mirrors the run's progress into status.
// `evalsi run -f` takes the same file.
//
// +kubebuilder:object:root=true
// +kubebuilder:subresource:status
// +kubebuilder:resource:shortName=er
// +kubebuilder:printcolumn:name="Phase",type=string,JSONPath=`.status.phase`
// +kubebuilder:printcolumn:name="Run",type=string,JSONPath=`.status.runID`
// +kubebuilder:printcolumn:name="Passed",type=integer,JSONPath=`.status.trials.passed`
// +kubebuilder:printcolumn:name="Total",type=integer,JSONPath=`.status.trials.total`
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`
type EvalRun struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	Spec   EvalRunSpec   `json:"spec"`
	Status EvalRunStatus `json:"status,omitempty"`
}

// EvalRunSpec is a run file's top-level fields (spec.Spec's JSON form) and
// the evalsi block. The sections are schemaless here: the operator checks
// them with the run file's own loader and validation (an Invalid condition
// points at the field), so the CRD never lags the run file's format. Only
// the top-level keys are typed, so a misspelt one is refused by the
// apiserver; TestSpecKeysMatchRunFile keeps them equal to spec.Spec's.
type EvalRunSpec struct {
	// Evalsi says where and as whom the run is submitted; a plain run file
	// has no such field, so `evalsi run -f` ignores it.
	Evalsi Connection `json:"evalsi"`

	// +optional
	Name string `json:"name,omitempty"`
	// Dataset: inline records are bounded (see MaxInlineRecordsBytes); put
	// large datasets under the server's datasets_dir and name them in path.
	// +kubebuilder:validation:Type=object
	Dataset apiextensionsv1.JSON `json:"dataset"`
	// +kubebuilder:validation:Type=object
	Target apiextensionsv1.JSON `json:"target"`
	// +optional
	// +kubebuilder:validation:Type=object
	Harness *apiextensionsv1.JSON `json:"harness,omitempty"`
	// +optional
	// +kubebuilder:validation:Type=object
	Environment *apiextensionsv1.JSON `json:"environment,omitempty"`
	// Evaluators are names or mappings.
	// +optional
	Evaluators []apiextensionsv1.JSON `json:"evaluators,omitempty"`
	// +optional
	// +kubebuilder:validation:Minimum=0
	Trials int32 `json:"trials,omitempty"`
	// +optional
	// +kubebuilder:validation:Type=object
	Judge *apiextensionsv1.JSON `json:"judge,omitempty"`
	// +optional
	// +kubebuilder:validation:Minimum=0
	Concurrency int32 `json:"concurrency,omitempty"`
	// +optional
	TrialTimeout string `json:"trial_timeout,omitempty"`
	// +optional
	// +kubebuilder:validation:Minimum=0
	Retries *int32 `json:"retries,omitempty"`
	// +optional
	// +kubebuilder:validation:Type=object
	Caps *apiextensionsv1.JSON `json:"caps,omitempty"`
	// Budget is the run file's budget: {usd, tokens, wall_clock}. The
	// server does not enforce it yet and refuses a run that has one.
	// +optional
	// +kubebuilder:validation:Type=object
	Budget *apiextensionsv1.JSON `json:"budget,omitempty"`
}

// Connection is the evalsi block: the server, the project and the Secret
// key holding the API token. The token is read when the operator submits
// and is never logged or written to status.
type Connection struct {
	// Server is the evalsid server's URL (https, or http to a loopback address).
	// +kubebuilder:validation:Pattern=`^https?://[^/]+`
	Server string `json:"server"`
	// Project owns the run; default: the token's project.
	// +optional
	Project string `json:"project,omitempty"`
	// TokenSecretRef is a key of a Secret in the EvalRun's namespace.
	TokenSecretRef SecretKeyRef `json:"tokenSecretRef"`
}

// SecretKeyRef names a key of a Secret in the same namespace.
type SecretKeyRef struct {
	// +kubebuilder:validation:MinLength=1
	Name string `json:"name"`
	// +kubebuilder:validation:MinLength=1
	Key string `json:"key"`
}

// Phase is where an EvalRun is.
// +kubebuilder:validation:Enum=Pending;Submitted;Running;Succeeded;Failed;Invalid
type Phase string

const (
	PhasePending   Phase = "Pending"
	PhaseSubmitted Phase = "Submitted"
	PhaseRunning   Phase = "Running"
	PhaseSucceeded Phase = "Succeeded"
	PhaseFailed    Phase = "Failed"
	PhaseInvalid   Phase = "Invalid"
)

// Condition types of an EvalRun.
const (
	ConditionSubmitted = "Submitted"
	ConditionComplete  = "Complete"
	ConditionInvalid   = "Invalid"
)

// MaxInlineRecordsBytes bounds dataset.records written inline: an object
// in etcd holds at most 1.5 MiB, status and managed fields included.
const MaxInlineRecordsBytes = 512 << 10

// EvalRunStatus is the run's progress on the server.
type EvalRunStatus struct {
	// +optional
	ObservedGeneration int64 `json:"observedGeneration,omitempty"`
	// +optional
	Phase Phase `json:"phase,omitempty"`
	// RunID is the server's run id.
	// +optional
	RunID string `json:"runID,omitempty"`
	// Submission is written before the run is submitted, so an operator
	// restarted mid-submit finds the run it made instead of making another.
	// +optional
	Submission *Submission `json:"submission,omitempty"`
	// +optional
	// +listType=map
	// +listMapKey=type
	Conditions []metav1.Condition `json:"conditions,omitempty"`
	// +optional
	Trials TrialCounts `json:"trials,omitempty"`
	// Summary is the run's summary once it has finished.
	// +optional
	Summary *RunSummary `json:"summary,omitempty"`
}

// Submission records a submit in flight: the run's name on the server and
// when the operator sent it.
type Submission struct {
	RunName string      `json:"runName"`
	Project string      `json:"project,omitempty"`
	Started metav1.Time `json:"started"`
}

// TrialCounts are the run's trials by outcome.
type TrialCounts struct {
	Total   int32 `json:"total"`
	Passed  int32 `json:"passed"`
	Failed  int32 `json:"failed"`
	Errored int32 `json:"errored"`
	Running int32 `json:"running"`
	Pending int32 `json:"pending"`
	// Cancelled trials were never run to the end: the run was cancelled
	// (its EvalRun deleted, or `evalsi runs cancel`).
	// +optional
	Cancelled int32 `json:"cancelled,omitempty"`
}

// RunSummary is the server's summary of a finished run. Numbers that are
// not integers are decimal strings (Kubernetes APIs carry no floats).
type RunSummary struct {
	Status string `json:"status"`
	// Scores are the run's mean scores by evaluator.
	// +optional
	Scores map[string]string `json:"scores,omitempty"`
	// +optional
	CostUSD string `json:"costUSD,omitempty"`
	// +optional
	Tokens int64 `json:"tokens,omitempty"`
	// +optional
	Error string `json:"error,omitempty"`
}

// EvalRunList is a list of EvalRuns.
//
// +kubebuilder:object:root=true
type EvalRunList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []EvalRun `json:"items"`
}
