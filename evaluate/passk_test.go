package evaluate

import (
	"math"
	"testing"
)

// binom is C(n, k) by the multiplicative formula, for checking small cases.
func binom(n, k int) float64 {
	if k < 0 || k > n {
		return 0
	}
	r := 1.0
	for i := 1; i <= k; i++ {
		r = r * float64(n-k+i) / float64(i)
	}
	return r
}

func TestPassK(t *testing.T) {
	tests := []struct {
		n, c, k int
		at, hat float64
	}{
		{5, 2, 1, 0.4, 0.4},
		{5, 2, 2, 0.7, 0.1},
		{5, 2, 3, 0.9, 0},
		{5, 2, 4, 1, 0}, // n−c < k: every draw holds a pass
		{5, 0, 1, 0, 0},
		{5, 0, 5, 0, 0},
		{5, 5, 1, 1, 1},
		{5, 5, 5, 1, 1},
		{1, 1, 1, 1, 1},
		{1, 0, 1, 0, 0},
		{3, 1, 1, 1.0 / 3, 1.0 / 3},
		{3, 1, 2, 2.0 / 3, 0},
		{3, 2, 2, 1, 1.0 / 3},
		{10, 3, 5, 1 - 21.0/252, 0},
		{10, 7, 5, 1, 21.0 / 252},
	}
	for _, tt := range tests {
		if got := PassAtK(tt.n, tt.c, tt.k); math.Abs(got-tt.at) > 1e-12 {
			t.Errorf("PassAtK(%d,%d,%d) = %v, want %v", tt.n, tt.c, tt.k, got, tt.at)
		}
		if got := PassHatK(tt.n, tt.c, tt.k); math.Abs(got-tt.hat) > 1e-12 {
			t.Errorf("PassHatK(%d,%d,%d) = %v, want %v", tt.n, tt.c, tt.k, got, tt.hat)
		}
	}
}

// TestPassKMatchesBinomials checks the product forms against the defining
// binomial ratios over every small case.
func TestPassKMatchesBinomials(t *testing.T) {
	for n := 1; n <= 20; n++ {
		for c := 0; c <= n; c++ {
			for k := 1; k <= n; k++ {
				at := 1 - binom(n-c, k)/binom(n, k)
				hat := binom(c, k) / binom(n, k)
				if got := PassAtK(n, c, k); math.Abs(got-at) > 1e-9 {
					t.Fatalf("PassAtK(%d,%d,%d) = %v, binomials give %v", n, c, k, got, at)
				}
				if got := PassHatK(n, c, k); math.Abs(got-hat) > 1e-9 {
					t.Fatalf("PassHatK(%d,%d,%d) = %v, binomials give %v", n, c, k, got, hat)
				}
			}
		}
	}
}

func TestPassKLargeN(t *testing.T) {
	// C(2000, 1000) overflows float64; the product forms do not.
	at, hat := PassAtK(2000, 1000, 1000), PassHatK(2000, 1000, 1000)
	if math.IsNaN(at) || math.IsInf(at, 0) || at < 0.999999 || at > 1 {
		t.Errorf("PassAtK(2000,1000,1000) = %v", at)
	}
	if math.IsNaN(hat) || hat < 0 || hat > 1e-200 {
		t.Errorf("PassHatK(2000,1000,1000) = %v", hat)
	}
	if got := PassAtK(2000, 1000, 1); math.Abs(got-0.5) > 1e-12 {
		t.Errorf("PassAtK(2000,1000,1) = %v, want 0.5", got)
	}
}

func TestPassKInvalid(t *testing.T) {
	for _, a := range [][3]int{{5, 2, 6}, {5, 2, 0}, {5, 6, 1}, {5, -1, 1}, {0, 0, 0}, {0, 0, 1}} {
		if !math.IsNaN(PassAtK(a[0], a[1], a[2])) || !math.IsNaN(PassHatK(a[0], a[1], a[2])) {
			t.Errorf("pass@k/pass^k(%v) is not NaN", a)
		}
	}
}

func BenchmarkPassAtK(b *testing.B) {
	for b.Loop() {
		PassAtK(1000, 400, 100)
	}
}
