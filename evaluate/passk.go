package evaluate

import "math"

// PassAtK is the unbiased estimate of pass@k from n trials of which c
// passed: the chance that at least one of k trials drawn without
// replacement passes, 1 − C(n−c, k)/C(n, k) (Chen et al. 2021).
//
// It is computed as a product, 1 − ∏_{i=n−c+1..n} (1 − k/i), so it stays
// exact for large n where the binomials would overflow.
//
// The arguments must satisfy 1 ≤ k ≤ n and 0 ≤ c ≤ n; otherwise the value
// is undefined and PassAtK returns NaN (callers skip records with fewer
// than k scored trials rather than invent a value).
func PassAtK(n, c, k int) float64 {
	if !validPassK(n, c, k) {
		return math.NaN()
	}
	if n-c < k { // every draw of k holds a pass
		return 1
	}
	p := 1.0
	for i := n - c + 1; i <= n; i++ {
		p *= 1 - float64(k)/float64(i)
	}
	return 1 - p
}

// PassHatK is pass^k from n trials of which c passed: the chance that all
// of k trials drawn without replacement pass, C(c, k)/C(n, k), computed as
// ∏_{i=0..k−1} (c−i)/(n−i). The arguments are as for PassAtK; invalid ones
// give NaN.
func PassHatK(n, c, k int) float64 {
	if !validPassK(n, c, k) {
		return math.NaN()
	}
	if c < k {
		return 0
	}
	p := 1.0
	for i := 0; i < k; i++ {
		p *= float64(c-i) / float64(n-i)
	}
	return p
}

func validPassK(n, c, k int) bool {
	return k >= 1 && k <= n && c >= 0 && c <= n
}
