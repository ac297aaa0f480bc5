package main

import (
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"strings"
	"time"

	"github.com/go-logr/logr"
	"github.com/spf13/cobra"
	"k8s.io/apimachinery/pkg/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/healthz"
	"sigs.k8s.io/controller-runtime/pkg/manager"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	"evals.si/k8s/apis/v1alpha1"
	"evals.si/k8s/controller"
)

// operatorOptions are `evalsid operator`'s flags.
type operatorOptions struct {
	kubeconfig      string
	metricsListen   string
	healthListen    string
	leaderElect     bool
	leaderNamespace string
	namespace       string
	poll            time.Duration
	servers         []string
}

// operator runs the EvalRun and SandboxClass controllers until ctx ends.
// It serves /healthz and /readyz on --health-listen and Prometheus metrics
// (controller-runtime's registry: reconciles, work queues, client calls)
// at /metrics on --metrics-listen.
func newOperatorCmd(stderr io.Writer, logger *slog.Logger) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "operator [flags]",
		Short: "Run the Kubernetes operator (EvalRun and SandboxClass controllers)",
		Long: `Run the EvalRun and SandboxClass controllers until interrupted, serving
/healthz and /readyz on --health-listen and Prometheus metrics on
--metrics-listen. See docs/kubernetes.md.`,
		Args: noArgs,
	}
	fs := cmd.Flags()
	var o operatorOptions
	fs.StringVar(&o.kubeconfig, "kubeconfig", "", "kubeconfig file (default: $KUBECONFIG, else the pod's service account)")
	fs.StringVar(&o.metricsListen, "metrics-listen", ":8080", `address of /metrics ("0" turns it off)`)
	fs.StringVar(&o.healthListen, "health-listen", ":8081", "address of /healthz and /readyz")
	fs.BoolVar(&o.leaderElect, "leader-elect", false, "hold a Lease so only one of several replicas reconciles")
	fs.StringVar(&o.leaderNamespace, "leader-election-namespace", "", "namespace of the Lease (default: the pod's own)")
	fs.StringVar(&o.namespace, "namespace", "", "watch only this namespace (default: all)")
	fs.DurationVar(&o.poll, "poll", 2*time.Second, "first interval between polls of a running run's progress (it grows with the run's age)")
	fs.Func("allow-server", "a server URL EvalRuns may name in spec.evalsi.server (repeat; default: any)", func(v string) error {
		o.servers = append(o.servers, strings.TrimRight(v, "/"))
		return nil
	})
	cmd.RunE = func(cmd *cobra.Command, args []string) error {
		ctx := cmd.Context()
		if len(args) > 0 {
			return usageErr{fmt.Errorf("operator takes no arguments, not %q", args)}
		}
		cfg, err := restConfig(o.kubeconfig)
		if err != nil {
			return err
		}
		mgr, err := newOperator(cfg, o, logger)
		if err != nil {
			return err
		}
		logger.Info("operator starting", "metrics", o.metricsListen, "health", o.healthListen, "leader_elect", o.leaderElect)
		if err := mgr.Start(ctx); err != nil {
			return fmt.Errorf("running the operator: %w", err)
		}
		return nil
	}
	return cmd
}

func restConfig(kubeconfig string) (*rest.Config, error) {
	rules := clientcmd.NewDefaultClientConfigLoadingRules()
	rules.ExplicitPath = kubeconfig
	cfg, err := clientcmd.NewNonInteractiveDeferredLoadingClientConfig(rules, &clientcmd.ConfigOverrides{}).ClientConfig()
	if err != nil {
		return nil, fmt.Errorf("finding the cluster (--kubeconfig, $KUBECONFIG, or run in a pod): %w", err)
	}
	return cfg, nil
}

// newOperator is the operator's manager with both reconcilers registered.
func newOperator(cfg *rest.Config, o operatorOptions, logger *slog.Logger) (manager.Manager, error) {
	scheme := runtime.NewScheme()
	if err := clientgoscheme.AddToScheme(scheme); err != nil {
		return nil, err
	}
	if err := v1alpha1.AddToScheme(scheme); err != nil {
		return nil, err
	}
	lg := logr.FromSlogHandler(logger.Handler())
	// controller-runtime also logs through its package logger (and warns
	// when none is set); both go to the same handler.
	ctrl.SetLogger(lg)
	opts := manager.Options{
		Scheme:                  scheme,
		Logger:                  lg,
		Metrics:                 metricsserver.Options{BindAddress: o.metricsListen},
		HealthProbeBindAddress:  o.healthListen,
		LeaderElection:          o.leaderElect,
		LeaderElectionID:        "evalsi-operator.evals.si",
		LeaderElectionNamespace: o.leaderNamespace,
	}
	if o.namespace != "" {
		opts.Cache = cache.Options{DefaultNamespaces: map[string]cache.Config{o.namespace: {}}}
	}
	mgr, err := ctrl.NewManager(cfg, opts)
	if err != nil {
		return nil, fmt.Errorf("making the operator's manager: %w", err)
	}
	if err := mgr.AddHealthzCheck("ping", healthz.Ping); err != nil {
		return nil, err
	}
	// Ready once the watches of both kinds have synced: before that a
	// reconcile would act on an empty view of the cluster (and while the
	// API server cannot be reached, or the CRDs are not installed, they
	// never do).
	if err := mgr.AddReadyzCheck("informers", func(req *http.Request) error {
		for _, obj := range []client.Object{&v1alpha1.EvalRun{}, &v1alpha1.SandboxClass{}} {
			inf, err := mgr.GetCache().GetInformer(req.Context(), obj, cache.BlockUntilSynced(false))
			if err != nil {
				return err
			}
			if !inf.HasSynced() {
				return fmt.Errorf("the watch of %T has not synced", obj)
			}
		}
		return nil
	}); err != nil {
		return nil, err
	}
	er := &controller.EvalRunReconciler{Client: mgr.GetClient(), Secrets: mgr.GetAPIReader(), Scheme: scheme,
		Dial: controller.DialAPI, Log: logger.With("controller", "evalrun"), Poll: o.poll, Servers: o.servers}
	if err := er.SetupWithManager(mgr); err != nil {
		return nil, fmt.Errorf("registering the EvalRun controller: %w", err)
	}
	sc := &controller.SandboxClassReconciler{Client: mgr.GetClient(), Log: logger.With("controller", "sandboxclass")}
	if err := sc.SetupWithManager(mgr); err != nil {
		return nil, fmt.Errorf("registering the SandboxClass controller: %w", err)
	}
	return mgr, nil
}
