package band

import (
	"testing"

	"github.com/qodaperio/autoscale/internal/api"
)

func TestRules(t *testing.T) {
	ok := Pool{Size: 2, Writeonly: 1}
	cases := []struct {
		name string
		b    Band
		cap  int
		p    Pool
		want string // "" for accepted; else the message
	}{
		{"accepted", Band{2, 6}, 16, ok, ""},
		{"pinned", Band{2, 2}, 16, ok, ""},
		{"at the hard cap", Band{2, 16}, 16, ok, ""},
		{"rule 1 zero", Band{0, 6}, 16, ok, "rule 1 (1 <= minNodes <= maxNodes): minNodes is 0, it must be at least 1"},
		{"rule 1 order", Band{4, 3}, 16, Pool{Size: 3}, "rule 1 (1 <= minNodes <= maxNodes): minNodes 4 is greater than maxNodes 3"},
		{"rule 2", Band{2, 17}, 16, ok, "rule 2 (maxNodes <= autoscale.hardCap): maxNodes 17 exceeds the hard cap 16"},
		{"rule 2 custom cap", Band{2, 9}, 8, ok, "rule 2 (maxNodes <= autoscale.hardCap): maxNodes 9 exceeds the hard cap 8"},
		{"rule 3", Band{2, 6}, 16, Pool{Size: 4, Writeonly: 2, Dual: 1}, "rule 3 (minNodes covers the write-capable nodes): minNodes 2 is below the pool's 3 write-capable nodes (writeonly 2 + dual 1)"},
		{"rule 4 above", Band{1, 3}, 16, Pool{Size: 5}, "rule 4 (current size inside the band): the pool's size 5 is outside the band [1, 3]; scale it into the band first"},
		{"rule 4 below", Band{3, 5}, 16, Pool{Size: 2}, "rule 4 (current size inside the band): the pool's size 2 is outside the band [3, 5]; scale it into the band first"},
		{"rule 4 suspended", Band{1, 3}, 16, Pool{Suspended: true}, "rule 4 (current size inside the band): the pool is suspended, size 0 is outside every band; resume or scale it into [1, 3] first"},
		{"rule 5", Band{1, 4}, 16, Pool{Size: 3, Cohorts: 2}, "rule 5 (no authored cohorts): the pool has 2 authored cohort(s) and cannot be elastic; a pool/scale that rewrites the role distribution clears them"},
		// The first failing rule is the one reported.
		{"1 before 2", Band{0, 99}, 16, ok, "rule 1 (1 <= minNodes <= maxNodes): minNodes is 0, it must be at least 1"},
		{"2 before 3", Band{1, 99}, 16, Pool{Size: 2, Writeonly: 2}, "rule 2 (maxNodes <= autoscale.hardCap): maxNodes 99 exceeds the hard cap 16"},
		{"3 before 4", Band{1, 2}, 16, Pool{Size: 5, Dual: 2}, "rule 3 (minNodes covers the write-capable nodes): minNodes 1 is below the pool's 2 write-capable nodes (writeonly 0 + dual 2)"},
		{"4 before 5", Band{1, 2}, 16, Pool{Size: 5, Cohorts: 1}, "rule 4 (current size inside the band): the pool's size 5 is outside the band [1, 2]; scale it into the band first"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			err := Validate(c.b, c.cap, c.p)
			if c.want == "" {
				if err != nil {
					t.Fatalf("refused: %v", err)
				}
				return
			}
			ae, ok := err.(*api.Error)
			if !ok || ae.Code != api.CodeInvalidBand || ae.Message != c.want || ae.Status() != 400 {
				t.Fatalf("got %v\nwant invalid_band: %s", err, c.want)
			}
		})
	}
}

func TestPair(t *testing.T) {
	two, six := 2, 6
	if _, set, err := Pair(nil, nil); set || err != nil {
		t.Fatal("neither bound: a cleared band")
	}
	if b, set, err := Pair(&two, &six); !set || err != nil || b != (Band{2, 6}) {
		t.Fatalf("both bounds: %v %v %v", b, set, err)
	}
	for _, c := range [][2]*int{{&two, nil}, {nil, &six}} {
		if _, _, err := Pair(c[0], c[1]); !api.HasCode(err, api.CodeInvalidBand) {
			t.Fatalf("one bound accepted: %v", err)
		}
	}
}

func TestCheckTarget(t *testing.T) {
	b := Band{2, 6}
	for _, in := range []int{2, 4, 6} {
		if err := CheckTarget(in, b); err != nil {
			t.Fatalf("%d refused: %v", in, err)
		}
	}
	err := CheckTarget(8, b)
	want := "outside_band: targetSize 8 is outside the autoscale band [2, 6]; adjust the band first via pool/setAutoscale"
	if err == nil || err.Error() != want || err.(*api.Error).Status() != 409 {
		t.Fatalf("got %v", err)
	}
	if CheckTarget(1, b) == nil || CheckTarget(0, b) == nil {
		t.Fatal("below the band accepted")
	}
}

// FuzzValidate checks that the rules never panic and that whatever they
// accept really is a band the rules describe.
func FuzzValidate(f *testing.F) {
	f.Add(2, 6, 16, 2, false, 1, 0, 0)
	f.Add(0, 0, 0, 0, true, 0, 0, 0)
	f.Add(-1, -9223372036854775808, 16, 9223372036854775807, false, 9223372036854775807, 9223372036854775807, 1)
	f.Fuzz(func(t *testing.T, minN, maxN, hardCap, size int, suspended bool, writeonly, dual, cohorts int) {
		p := Pool{Size: size, Suspended: suspended, Writeonly: writeonly, Dual: dual, Cohorts: cohorts}
		if suspended {
			p.Size = 0
		}
		err := Validate(Band{minN, maxN}, hardCap, p)
		if err != nil {
			if !api.HasCode(err, api.CodeInvalidBand) {
				t.Fatalf("error without invalid_band: %v", err)
			}
			return
		}
		if minN < 1 || minN > maxN || maxN > hardCap || p.Size < minN || p.Size > maxN || cohorts > 0 {
			t.Fatalf("accepted a band that breaks a rule: [%d, %d] cap %d pool %+v", minN, maxN, hardCap, p)
		}
		if w := writeonly + dual; w > minN && writeonly >= 0 && dual >= 0 && w >= 0 {
			t.Fatalf("accepted minNodes %d below %d writers", minN, w)
		}
	})
}
