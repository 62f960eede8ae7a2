package pipeline

import "testing"

func FuzzValidTenantMatchesRegexp(f *testing.F) {
	for _, s := range []string{"acme", "a", "ab", "Acme", "1abc", "a-b-c", "a_b", "abcdefghijklmnopqrstuvwxyz0123456", "abcdefghijklmnopqrstuvwxyz01234567", ""} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		if got, want := validTenant(s), tenantRE.MatchString(s); got != want {
			t.Fatalf("validTenant(%q) = %v, regexp says %v", s, got, want)
		}
	})
}
