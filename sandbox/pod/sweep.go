package pod

import (
	"context"
	"errors"
	"fmt"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
)

// Sweep removes this pool's sandbox pods and NetworkPolicies whose owner
// dead reports as gone (a policy whose pod never came, too: an engine
// killed between the two creates); objects without an owner are never
// touched. It counts sandboxes removed.
func (r *Rung) Sweep(ctx context.Context, dead func(owner string) bool) (int, error) {
	sel := labels.SelectorFromSet(labels.Set{LabelManagedBy: ManagedBy, LabelPool: r.o.Pool}).String()
	pods, err := r.cs.CoreV1().Pods(r.o.Namespace).List(ctx, metav1.ListOptions{LabelSelector: sel})
	if err != nil {
		return 0, fmt.Errorf("listing the pod sandboxes of pool %s in namespace %s: %w", r.o.Pool, r.o.Namespace, err)
	}
	pols, err := r.cs.NetworkingV1().NetworkPolicies(r.o.Namespace).List(ctx, metav1.ListOptions{LabelSelector: sel})
	if err != nil {
		return 0, fmt.Errorf("listing the sandbox NetworkPolicies of pool %s in namespace %s: %w", r.o.Pool, r.o.Namespace, err)
	}
	var objs []metav1.ObjectMeta
	for _, p := range pods.Items {
		objs = append(objs, p.ObjectMeta)
	}
	for _, p := range pols.Items {
		objs = append(objs, p.ObjectMeta)
	}
	doomed := map[string]bool{}
	var order []string
	for _, m := range objs {
		owner := m.Annotations[AnnotationOwner]
		// The label is the owner's hash: an annotation edited to name
		// another owner does not make another engine's pod sweepable.
		if owner == "" || m.Labels[LabelOwner] != OwnerHash(owner) || doomed[m.Name] || !dead(owner) {
			continue
		}
		doomed[m.Name] = true
		order = append(order, m.Name)
	}
	n := 0
	var errs []error
	for _, name := range order {
		if err := deleteSandbox(ctx, r, name); err != nil {
			errs = append(errs, err)
			continue
		}
		n++
	}
	return n, errors.Join(errs...)
}
