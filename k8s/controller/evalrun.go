// Package controller holds the operator's reconcilers: EvalRun (submit a
// run file to an evalsid server and mirror its progress) and SandboxClass
// (a sandbox pool as a Deployment and a Service). What they decide is in
// plain functions over the objects, so most of it is testable without a
// node; the tests run them against a real apiserver.
package controller

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/predicate"

	"evals.si/api"
	"evals.si/apiclient"
	"evals.si/k8s/apis/v1alpha1"
	"evals.si/spec"
)

const (
	// Finalizer holds an EvalRun until its run is cancelled on the server.
	Finalizer = "evals.si/cancel-run"
	// RunLabel marks the pods of a run (the pod rung sets it); the
	// reconciler makes the EvalRun their owner so they go with it.
	RunLabel = "evals.si/run"
)

// Server is what the EvalRun reconciler needs of an evalsid server;
// *apiclient.Client has it.
type Server interface {
	Submit(ctx context.Context, name string, s *spec.Spec, project string) (api.Run, error)
	Run(ctx context.Context, id string) (api.Run, error)
	Runs(ctx context.Context, limit int, before string) (api.RunList, error)
	Trials(ctx context.Context, runID string) (api.TrialList, error)
	Cancel(ctx context.Context, id string) (api.Run, error)
}

// Dialer returns a client of the server at url that sends token.
type Dialer func(url, token string) (Server, error)

// DialAPI is the Dialer of the real API client.
func DialAPI(url, token string) (Server, error) { return apiclient.New(url, token) }

// EvalRunReconciler submits EvalRuns and follows their runs.
type EvalRunReconciler struct {
	Client client.Client
	// Secrets reads the token Secrets; an uncached reader, so the operator
	// needs only get on the Secrets it is pointed at, not a cluster-wide
	// watch of every Secret.
	Secrets client.Reader
	Scheme  *runtime.Scheme
	Dial    Dialer
	Log     *slog.Logger
	// Poll is the first interval between polls of a running run; it grows
	// with the run's age up to MaxPoll.
	Poll, MaxPoll time.Duration
	// Servers, when set, are the only server URLs EvalRuns may name: the
	// operator makes requests wherever spec.evalsi.server points, from
	// inside the cluster, so a cluster whose EvalRun authors are not all
	// trusted pins it.
	Servers []string
	// CancelFor is how long a deleted EvalRun waits for the server to take
	// its cancel before letting go (the server may be gone for good).
	CancelFor time.Duration
	Now       func() time.Time
}

func (r *EvalRunReconciler) defaults() {
	if r.Poll <= 0 {
		r.Poll = 2 * time.Second
	}
	if r.MaxPoll < r.Poll {
		r.MaxPoll = max(30*time.Second, r.Poll)
	}
	if r.CancelFor <= 0 {
		r.CancelFor = 5 * time.Minute
	}
	if r.Now == nil {
		r.Now = time.Now
	}
	if r.Log == nil {
		r.Log = slog.Default()
	}
	if r.Dial == nil {
		r.Dial = DialAPI
	}
	if r.Secrets == nil {
		r.Secrets = r.Client
	}
}

// SetupWithManager registers the reconciler. Its own status writes do not
// wake it (it polls on a timer); spec changes and deletion do.
func (r *EvalRunReconciler) SetupWithManager(mgr ctrl.Manager) error {
	r.defaults()
	deleting := predicate.Funcs{UpdateFunc: func(e event.UpdateEvent) bool {
		return !e.ObjectNew.GetDeletionTimestamp().IsZero()
	}}
	return ctrl.NewControllerManagedBy(mgr).
		For(&v1alpha1.EvalRun{}, builder.WithPredicates(predicate.Or(predicate.GenerationChangedPredicate{}, deleting))).
		Named("evalrun").
		Complete(r)
}

// Reconcile moves one EvalRun on: validate, submit once, poll, cancel on
// deletion.
func (r *EvalRunReconciler) Reconcile(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	r.defaults()
	var er v1alpha1.EvalRun
	if err := r.Client.Get(ctx, req.NamespacedName, &er); err != nil {
		return ctrl.Result{}, client.IgnoreNotFound(err)
	}
	log := r.Log.With("evalrun", req.String())
	if !er.DeletionTimestamp.IsZero() {
		return r.finalize(ctx, &er, log)
	}
	if controllerutil.AddFinalizer(&er, Finalizer) {
		if err := r.Client.Update(ctx, &er); err != nil {
			return ctrl.Result{}, fmt.Errorf("adding the finalizer to EvalRun %s: %w", req, err)
		}
	}
	st := &er.Status
	if terminal(st.Phase) || st.Phase == v1alpha1.PhaseInvalid && st.ObservedGeneration == er.Generation {
		return ctrl.Result{}, nil
	}
	before := st.DeepCopy()

	if st.RunID == "" {
		f, err := LoadSpec(&er)
		if err != nil {
			st.Phase = v1alpha1.PhaseInvalid
			st.ObservedGeneration = er.Generation
			setCondition(st, er.Generation, v1alpha1.ConditionInvalid, metav1.ConditionTrue, "SpecInvalid", InvalidMessage(err))
			log.Info("the EvalRun's spec is invalid", "err", InvalidMessage(err))
			return ctrl.Result{}, r.writeStatus(ctx, &er, before)
		}
		setCondition(st, er.Generation, v1alpha1.ConditionInvalid, metav1.ConditionFalse, "SpecValid", "the spec loads and validates")
		srv, err := r.server(ctx, &er)
		if err != nil {
			st.Phase = v1alpha1.PhasePending
			setCondition(st, er.Generation, v1alpha1.ConditionSubmitted, metav1.ConditionFalse, "CannotSubmit", err.Error())
			if werr := r.writeStatus(ctx, &er, before); werr != nil {
				return ctrl.Result{}, werr
			}
			return ctrl.Result{}, err
		}
		if err := r.submit(ctx, &er, srv, f, log); err != nil {
			return ctrl.Result{}, err
		}
		// The run exists now; the first poll comes after a short wait.
		return ctrl.Result{RequeueAfter: r.Poll}, nil
	}

	srv, err := r.server(ctx, &er)
	if err != nil {
		return ctrl.Result{}, err
	}
	run, err := srv.Run(ctx, st.RunID)
	if err != nil {
		if isStatus(err, http.StatusNotFound) {
			st.Phase = v1alpha1.PhaseFailed
			setCondition(st, er.Generation, v1alpha1.ConditionComplete, metav1.ConditionTrue, "RunGone", fmt.Sprintf("the server has no run %s (deleted, or another server)", st.RunID))
			return ctrl.Result{}, r.writeStatus(ctx, &er, before)
		}
		return ctrl.Result{}, fmt.Errorf("reading run %s from %s: %w", st.RunID, er.Spec.Evalsi.Server, err)
	}
	trials, err := srv.Trials(ctx, st.RunID)
	if err != nil {
		return ctrl.Result{}, fmt.Errorf("reading the trials of run %s from %s: %w", st.RunID, er.Spec.Evalsi.Server, err)
	}
	Progress(st, er.Generation, run, trials.Trials)
	if err := r.adoptPods(ctx, &er); err != nil {
		return ctrl.Result{}, err
	}
	if err := r.writeStatus(ctx, &er, before); err != nil {
		return ctrl.Result{}, err
	}
	if terminal(st.Phase) {
		log.Info("run finished", "run", st.RunID, "phase", st.Phase)
		return ctrl.Result{}, nil
	}
	return ctrl.Result{RequeueAfter: r.pollEvery(st)}, nil
}

// pollEvery grows with the run's age: a tenth of it, between Poll and
// MaxPoll, so a short run is seen finishing soon and a day-long one costs
// the server little.
func (r *EvalRunReconciler) pollEvery(st *v1alpha1.EvalRunStatus) time.Duration {
	d := r.Poll
	if st.Submission != nil {
		d = max(d, r.Now().Sub(st.Submission.Started.Time)/10)
	}
	return min(d, r.MaxPoll)
}

// submit submits the run exactly once. The submission is recorded in
// status before the request goes out; an operator that finds a recorded
// submission without a run id (it died mid-submit) looks for that run on
// the server before submitting again.
func (r *EvalRunReconciler) submit(ctx context.Context, er *v1alpha1.EvalRun, srv Server, f *spec.File, log *slog.Logger) error {
	st := &er.Status
	if st.Submission != nil {
		run, found, err := findSubmitted(ctx, srv, st.Submission)
		if err != nil {
			return fmt.Errorf("looking for the run submitted at %s before submitting again: %w", st.Submission.Started.UTC().Format(time.RFC3339), err)
		}
		if found {
			log.Info("found the run an earlier submit made", "run", run.ID)
			return r.submitted(ctx, er, run)
		}
	}
	st.Phase = v1alpha1.PhasePending
	st.ObservedGeneration = er.Generation
	st.Submission = &v1alpha1.Submission{RunName: f.Spec.Name, Project: er.Spec.Evalsi.Project, Started: metav1.NewTime(r.Now())}
	// An update of a stale object fails here, so two operators (or a
	// restarted one reading its cache late) cannot both get past this line.
	if err := r.Client.Status().Update(ctx, er); err != nil {
		return fmt.Errorf("recording the submission of EvalRun %s/%s: %w", er.Namespace, er.Name, err)
	}
	run, err := srv.Submit(ctx, er.Name+".yaml", f.Spec, er.Spec.Evalsi.Project)
	if err != nil {
		var ae *apiclient.Error
		if isStatus(err, http.StatusUnauthorized, http.StatusForbidden) && errors.As(err, &ae) {
			// A token or a grant can be fixed without touching the spec:
			// no run was made, so trying again later is safe.
			b := st.DeepCopy()
			st.Submission = nil
			setCondition(st, er.Generation, v1alpha1.ConditionSubmitted, metav1.ConditionFalse, "NotAllowed", ae.Error())
			if werr := r.writeStatus(ctx, er, b); werr != nil {
				return werr
			}
			return fmt.Errorf("submitting EvalRun %s/%s to %s: %w", er.Namespace, er.Name, er.Spec.Evalsi.Server, err)
		}
		if errors.As(err, &ae) && ae.Status >= 400 && ae.Status < 500 && ae.Status != http.StatusTooManyRequests {
			// The server refused the run (bad spec, no rights): trying
			// again submits the same refusal.
			b := st.DeepCopy()
			st.Phase = v1alpha1.PhaseInvalid
			st.Submission = nil
			setCondition(st, er.Generation, v1alpha1.ConditionInvalid, metav1.ConditionTrue, "ServerRefused", ae.Error())
			setCondition(st, er.Generation, v1alpha1.ConditionSubmitted, metav1.ConditionFalse, "ServerRefused", ae.Error())
			return r.writeStatus(ctx, er, b)
		}
		return fmt.Errorf("submitting EvalRun %s/%s to %s: %w", er.Namespace, er.Name, er.Spec.Evalsi.Server, err)
	}
	log.Info("run submitted", "run", run.ID, "server", er.Spec.Evalsi.Server)
	return r.submitted(ctx, er, run)
}

func (r *EvalRunReconciler) submitted(ctx context.Context, er *v1alpha1.EvalRun, run api.Run) error {
	st := &er.Status
	before := st.DeepCopy()
	st.RunID = run.ID
	st.Phase = v1alpha1.PhaseSubmitted
	st.ObservedGeneration = er.Generation
	setCondition(st, er.Generation, v1alpha1.ConditionSubmitted, metav1.ConditionTrue, "Submitted", "run "+run.ID+" on "+er.Spec.Evalsi.Server)
	setCondition(st, er.Generation, v1alpha1.ConditionComplete, metav1.ConditionFalse, "Running", "the run is in progress")
	return r.writeStatus(ctx, er, before)
}

// findSubmitted looks for the run a recorded submission made: the newest
// run of its name and project created since shortly before the
// submission (the server's clock may differ a little).
func findSubmitted(ctx context.Context, srv Server, sub *v1alpha1.Submission) (api.Run, bool, error) {
	since := sub.Started.Add(-2 * time.Minute)
	before := ""
	for range 20 {
		page, err := srv.Runs(ctx, 100, before)
		if err != nil {
			return api.Run{}, false, err
		}
		for _, run := range page.Runs {
			if run.CreatedAt.Before(since) {
				return api.Run{}, false, nil
			}
			if run.Name == sub.RunName && (sub.Project == "" || run.Project == sub.Project) {
				return run, true, nil
			}
		}
		if page.Next == "" {
			return api.Run{}, false, nil
		}
		before = page.Next
	}
	return api.Run{}, false, errors.New("more than 2000 runs since the submission; cannot tell whether it arrived")
}

// finalize cancels a run still in progress and lets the EvalRun go.
func (r *EvalRunReconciler) finalize(ctx context.Context, er *v1alpha1.EvalRun, log *slog.Logger) (ctrl.Result, error) {
	if !controllerutil.ContainsFinalizer(er, Finalizer) {
		return ctrl.Result{}, nil
	}
	st := &er.Status
	if !terminal(st.Phase) && (st.RunID != "" || st.Submission != nil) {
		err := r.cancel(ctx, er)
		if err != nil {
			if !isStatus(err, http.StatusNotFound, http.StatusMethodNotAllowed) && r.Now().Sub(er.DeletionTimestamp.Time) < r.CancelFor {
				return ctrl.Result{}, fmt.Errorf("cancelling run %s of the deleted EvalRun %s/%s: %w", st.RunID, er.Namespace, er.Name, err)
			}
			// The run is gone, the server cannot cancel, or it has not
			// answered for CancelFor: the object must not stay forever.
			log.Warn("letting the EvalRun go without cancelling its run", "run", st.RunID, "err", err)
		} else {
			log.Info("cancelled the run of the deleted EvalRun", "run", st.RunID)
		}
	}
	if controllerutil.RemoveFinalizer(er, Finalizer) {
		if err := r.Client.Update(ctx, er); err != nil && !apierrors.IsNotFound(err) {
			return ctrl.Result{}, fmt.Errorf("removing the finalizer of EvalRun %s/%s: %w", er.Namespace, er.Name, err)
		}
	}
	return ctrl.Result{}, nil
}

func (r *EvalRunReconciler) cancel(ctx context.Context, er *v1alpha1.EvalRun) error {
	srv, err := r.server(ctx, er)
	if err != nil {
		return err
	}
	id := er.Status.RunID
	if id == "" {
		run, found, err := findSubmitted(ctx, srv, er.Status.Submission)
		if err != nil || !found {
			return err
		}
		id = run.ID
	}
	_, err = srv.Cancel(ctx, id)
	return err
}

// server is a client of the EvalRun's server with the token from its
// Secret. The token goes nowhere else: not into status, events or logs.
func (r *EvalRunReconciler) server(ctx context.Context, er *v1alpha1.EvalRun) (Server, error) {
	if len(r.Servers) > 0 && !slices.Contains(r.Servers, strings.TrimRight(er.Spec.Evalsi.Server, "/")) {
		return nil, fmt.Errorf("spec.evalsi.server %q is not a server this operator submits to (its --allow-server list: %s)", er.Spec.Evalsi.Server, strings.Join(r.Servers, ", "))
	}
	ref := er.Spec.Evalsi.TokenSecretRef
	var sec corev1.Secret
	if err := r.Secrets.Get(ctx, types.NamespacedName{Namespace: er.Namespace, Name: ref.Name}, &sec); err != nil {
		return nil, fmt.Errorf("reading the API token from Secret %s/%s: %w", er.Namespace, ref.Name, err)
	}
	tok := strings.TrimSpace(string(sec.Data[ref.Key]))
	if tok == "" {
		return nil, fmt.Errorf("Secret %s/%s has no key %q (spec.evalsi.tokenSecretRef) holding the API token", er.Namespace, ref.Name, ref.Key)
	}
	srv, err := r.Dial(er.Spec.Evalsi.Server, tok)
	if err != nil {
		return nil, fmt.Errorf("spec.evalsi.server: %w", err)
	}
	return srv, nil
}

// adoptPods makes the EvalRun an owner of its run's pods in its namespace,
// so deleting the EvalRun deletes them.
func (r *EvalRunReconciler) adoptPods(ctx context.Context, er *v1alpha1.EvalRun) error {
	var pods corev1.PodList
	if err := r.Client.List(ctx, &pods, client.InNamespace(er.Namespace), client.MatchingLabels{RunLabel: er.Status.RunID}); err != nil {
		return fmt.Errorf("listing the pods of run %s: %w", er.Status.RunID, err)
	}
	for i := range pods.Items {
		p := &pods.Items[i]
		owned, err := controllerutil.HasOwnerReference(p.OwnerReferences, er, r.Client.Scheme())
		if err != nil || owned {
			continue
		}
		if err := controllerutil.SetOwnerReference(er, p, r.Client.Scheme()); err != nil {
			return fmt.Errorf("adopting pod %s: %w", p.Name, err)
		}
		if err := r.Client.Update(ctx, p); err != nil && !apierrors.IsNotFound(err) && !apierrors.IsConflict(err) {
			return fmt.Errorf("adopting pod %s: %w", p.Name, err)
		}
	}
	return nil
}

func (r *EvalRunReconciler) writeStatus(ctx context.Context, er *v1alpha1.EvalRun, before *v1alpha1.EvalRunStatus) error {
	if equality.Semantic.DeepEqual(&er.Status, before) {
		return nil
	}
	if err := r.Client.Status().Update(ctx, er); err != nil {
		return fmt.Errorf("writing the status of EvalRun %s/%s: %w", er.Namespace, er.Name, err)
	}
	return nil
}

// LoadSpec is the EvalRun's run spec, loaded, defaulted and validated as
// the server will: the same loader `evalsi run -f` uses.
func LoadSpec(er *v1alpha1.EvalRun) (*spec.File, error) {
	raw, err := RunSpecJSON(&er.Spec)
	if err != nil {
		return nil, err
	}
	f, err := spec.Parse(er.Name+".yaml", raw)
	if err != nil {
		return nil, err
	}
	if err := f.Spec.Validate(); err != nil {
		return nil, err
	}
	return f, nil
}

// RunSpecJSON is the run file the EvalRun holds, as JSON: its spec without
// the evalsi block. Inline records over MaxInlineRecordsBytes are refused
// with what to do instead.
func RunSpecJSON(s *v1alpha1.EvalRunSpec) ([]byte, error) {
	b, err := json.Marshal(s)
	if err != nil {
		return nil, fmt.Errorf("encoding the EvalRun's spec: %w", err)
	}
	var m map[string]json.RawMessage
	if err := json.Unmarshal(b, &m); err != nil {
		return nil, fmt.Errorf("decoding the EvalRun's spec: %w", err)
	}
	delete(m, spec.EnvelopeBlock)
	var ds struct {
		Records json.RawMessage `json:"records"`
	}
	if d, ok := m["dataset"]; ok && json.Unmarshal(d, &ds) == nil && len(ds.Records) > v1alpha1.MaxInlineRecordsBytes {
		return nil, &spec.Error{Field: "dataset.records", Msg: fmt.Sprintf("%d KiB of records inline; an EvalRun holds at most %d KiB (etcd keeps objects up to 1.5 MiB)", len(ds.Records)>>10, v1alpha1.MaxInlineRecordsBytes>>10),
			Hint: "put the records in a JSONL file under the server's datasets_dir and name it with dataset: {path: FILE}"}
	}
	return json.Marshal(m)
}

// InvalidMessage says what is wrong with a spec by field path (spec.x.y):
// the line numbers of the JSON the apiserver holds would mean nothing to
// whoever wrote the YAML.
func InvalidMessage(err error) string {
	var list []*spec.Error
	var es spec.Errors
	var e *spec.Error
	switch {
	case errors.As(err, &es):
		list = es
	case errors.As(err, &e):
		list = []*spec.Error{e}
	default:
		return err.Error()
	}
	var b strings.Builder
	for i, e := range list {
		if i > 0 {
			b.WriteString("\n")
		}
		if e.Field != "" {
			b.WriteString("spec." + e.Field + ": ")
		}
		b.WriteString(e.Msg)
		if e.Hint != "" {
			b.WriteString("; " + e.Hint)
		}
	}
	// A condition's message is at most 32768 bytes.
	msg := b.String()
	if len(msg) > 16<<10 {
		msg = msg[:16<<10] + "…"
	}
	return msg
}

// Progress writes a run's state on the server into status.
func Progress(st *v1alpha1.EvalRunStatus, gen int64, run api.Run, trials []api.Trial) {
	st.Trials = Count(trials)
	switch run.Status {
	case "running":
		st.Phase = v1alpha1.PhaseSubmitted
		if st.Trials.Running > 0 || st.Trials.Total > st.Trials.Pending {
			st.Phase = v1alpha1.PhaseRunning
		}
	case "completed":
		st.Phase = v1alpha1.PhaseSucceeded
		setCondition(st, gen, v1alpha1.ConditionComplete, metav1.ConditionTrue, "Completed", "the run completed")
	default:
		st.Phase = v1alpha1.PhaseFailed
		msg := "the run ended " + run.Status
		if run.Error != "" {
			msg += ": " + run.Error
		}
		setCondition(st, gen, v1alpha1.ConditionComplete, metav1.ConditionTrue, "Run"+capitalize(run.Status), msg)
	}
	if s := run.Summary; s != nil {
		sum := &v1alpha1.RunSummary{Status: s.Status, Tokens: int64(s.Tokens), CostUSD: decimal(s.CostUSD), Error: run.Error}
		if len(s.Scores) > 0 {
			sum.Scores = map[string]string{}
			for k, v := range s.Scores {
				sum.Scores[k] = decimal(v)
			}
		}
		st.Summary = sum
	}
}

// Count counts trials by outcome; a finished trial that did not pass
// counts as failed, so the counts add up to Total.
func Count(trials []api.Trial) v1alpha1.TrialCounts {
	var c v1alpha1.TrialCounts
	for _, t := range trials {
		c.Total++
		switch t.Status {
		case "pending":
			c.Pending++
		case "running":
			c.Running++
		case "cancelled":
			c.Cancelled++
		case "finished":
			if passed(t) {
				c.Passed++
			} else {
				c.Failed++
			}
		default: // errored, or a status this operator does not know
			c.Errored++
		}
	}
	return c
}

// passed is a finished trial's verdict: the checker's when it has one
// (agent runs), else whether every evaluator scored it 1 (exact-match and
// the like score 0 or 1).
func passed(t api.Trial) bool {
	if t.Passed != nil {
		return *t.Passed
	}
	if len(t.Scores) == 0 {
		return false
	}
	for _, v := range t.Scores {
		if v < 1 {
			return false
		}
	}
	return true
}

func decimal(v float64) string { return strconv.FormatFloat(v, 'g', 6, 64) }

func capitalize(s string) string {
	if s == "" {
		return s
	}
	return strings.ToUpper(s[:1]) + s[1:]
}

func terminal(p v1alpha1.Phase) bool {
	return p == v1alpha1.PhaseSucceeded || p == v1alpha1.PhaseFailed
}

func setCondition(st *v1alpha1.EvalRunStatus, gen int64, typ string, status metav1.ConditionStatus, reason, msg string) {
	meta.SetStatusCondition(&st.Conditions, metav1.Condition{Type: typ, Status: status, Reason: reason, Message: msg, ObservedGeneration: gen})
}

// isStatus reports whether err is an API answer with one of the statuses.
func isStatus(err error, statuses ...int) bool {
	var ae *apiclient.Error
	if !errors.As(err, &ae) {
		return false
	}
	return slices.Contains(statuses, ae.Status)
}
