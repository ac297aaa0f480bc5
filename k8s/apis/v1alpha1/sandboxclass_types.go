package v1alpha1

import (
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// SandboxClass is a sandbox pool: a Deployment of `evalsid sandboxd` and a
// Service workers lease sandboxes from over mutual TLS. It is namespaced:
// the pool's pods, its TLS Secret and the workers that use it live in one
// namespace, and a team's classes cannot reach another team's Secrets.
//
// +kubebuilder:object:root=true
// +kubebuilder:subresource:status
// +kubebuilder:resource:shortName=sbc
// +kubebuilder:printcolumn:name="Pool",type=string,JSONPath=`.spec.pool`
// +kubebuilder:printcolumn:name="Ready",type=integer,JSONPath=`.status.readyReplicas`
// +kubebuilder:printcolumn:name="Address",type=string,JSONPath=`.status.address`
type SandboxClass struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	Spec   SandboxClassSpec   `json:"spec"`
	Status SandboxClassStatus `json:"status,omitempty"`
}

// Pool kinds: sandboxd runs sandboxes in bubblewrap inside the pool's pods;
// pod makes one hardened pod per sandbox (the pod rung).
// +kubebuilder:validation:Enum=sandboxd;pod
type Pool string

const (
	PoolSandboxd Pool = "sandboxd"
	PoolPod      Pool = "pod"
)

// SandboxClassSpec is the pool's settings.
type SandboxClassSpec struct {
	// Pool is sandboxd (default) or pod.
	// +kubebuilder:default=sandboxd
	// +optional
	Pool Pool `json:"pool,omitempty"`
	// Image is the evalsid image the pool's pods run.
	// +kubebuilder:validation:MinLength=1
	Image string `json:"image"`
	// DefaultImage runs a pod pool's sandboxes whose environment names no
	// image (on sandboxd, such a sandbox runs on the pool image's own root).
	// +optional
	DefaultImage string `json:"defaultImage,omitempty"`
	// RuntimeClassName is passed to sandbox pods (gVisor, Kata) on the pod
	// rung, and to the pool's pods on sandboxd.
	// +optional
	RuntimeClassName *string `json:"runtimeClassName,omitempty"`
	// Resources are each sandbox's (pod rung) or each pool pod's (sandboxd).
	// +optional
	Resources corev1.ResourceRequirements `json:"resources,omitempty"`
	// Limits are the most any run's sandbox may ask of the pool
	// (evalsid sandboxd --max-*): a request over one is refused, and a
	// sandbox that asks nothing gets it. Unset: the run's own limits.
	// +optional
	Limits SandboxLimits `json:"limits,omitempty"`
	// Egress is the pool's allowlist for sandboxes with network access.
	// +optional
	Egress Egress `json:"egress,omitempty"`
	// Warm is how many pool pods run (sandboxd); a pod pool runs one and
	// makes each sandbox pod when it is leased.
	// +kubebuilder:validation:Minimum=0
	// +kubebuilder:validation:Maximum=1000
	// +kubebuilder:default=1
	// +optional
	Warm int32 `json:"warm,omitempty"`
	// TLSSecretName names a kubernetes.io/tls Secret (tls.crt, tls.key,
	// ca.crt) the pool serves with and checks workers' certificates against.
	// +kubebuilder:validation:MinLength=1
	TLSSecretName string `json:"tlsSecretName"`
}

// SandboxLimits are a pool's maxima over its sandboxes' limits.
type SandboxLimits struct {
	// +kubebuilder:validation:Minimum=0
	// +optional
	MemoryMB int32 `json:"memoryMB,omitempty"`
	// CPUs is a quantity (2, 500m).
	// +optional
	CPUs *resource.Quantity `json:"cpus,omitempty"`
	// +kubebuilder:validation:Minimum=0
	// +optional
	Pids int32 `json:"pids,omitempty"`
	// +kubebuilder:validation:Minimum=0
	// +optional
	DiskMB int32 `json:"diskMB,omitempty"`
	// +kubebuilder:validation:Minimum=0
	// +optional
	FileSizeMB int32 `json:"fileSizeMB,omitempty"`
	// CommandTimeout bounds each command (a Go duration: 30m).
	// +optional
	CommandTimeout *metav1.Duration `json:"commandTimeout,omitempty"`
}

// Egress is the network a pool lets sandboxes reach.
type Egress struct {
	// +optional
	// +listType=set
	AllowHosts []string `json:"allow_hosts,omitempty"`
}

// SandboxClassStatus reports the pool.
type SandboxClassStatus struct {
	// +optional
	ObservedGeneration int64 `json:"observedGeneration,omitempty"`
	// ReadyReplicas are the pool's ready pods.
	// +optional
	ReadyReplicas int32 `json:"readyReplicas,omitempty"`
	// Address is what workers set as sandbox.address (host:port).
	// +optional
	Address string `json:"address,omitempty"`
	// +optional
	// +listType=map
	// +listMapKey=type
	Conditions []metav1.Condition `json:"conditions,omitempty"`
}

// ConditionReady is a SandboxClass's readiness: its Deployment has every
// replica available.
const ConditionReady = "Ready"

// SandboxClassList is a list of SandboxClasses.
//
// +kubebuilder:object:root=true
type SandboxClassList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []SandboxClass `json:"items"`
}
