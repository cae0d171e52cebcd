package pool

import (
	"strings"
	"testing"

	"github.com/qodaperio/autoscale/internal/api"
	"github.com/qodaperio/autoscale/internal/band"
)

func ptr(v int) *int { return &v }

func key() Key { return Key{Tenant: "acme", TenantDB: "acme_sales", Pool: "bi"} }

func TestNewDefaultsToOneWriter(t *testing.T) {
	p, err := New(Spec{Key: key(), Size: ptr(3)}, 16)
	if err != nil {
		t.Fatal(err)
	}
	if p.Roles != (Roles{Dual: 1, Readonly: 2}) || p.Size() != 3 || p.Band != nil {
		t.Fatalf("got %+v", p)
	}
}

func TestNewWithBandRunsTheRules(t *testing.T) {
	_, err := New(Spec{Key: key(), Size: ptr(2), Roles: &Roles{Writeonly: 2}, MinNodes: ptr(1), MaxNodes: ptr(4)}, 16)
	if !api.HasCode(err, api.CodeInvalidBand) || !strings.Contains(err.Error(), "rule 3") {
		t.Fatalf("got %v", err)
	}
	p, err := New(Spec{Key: key(), Size: ptr(2), Roles: &Roles{Writeonly: 1, Readonly: 1}, MinNodes: ptr(2), MaxNodes: ptr(6)}, 16)
	if err != nil || p.Band == nil || *p.Band != (band.Band{Min: 2, Max: 6}) {
		t.Fatalf("got %+v %v", p, err)
	}
}

func TestScale(t *testing.T) {
	p := &Pool{Key: key(), Roles: Roles{Writeonly: 1, Readonly: 1, Dual: 1}, Cohorts: []Cohort{{Name: "etl", Nodes: 1}}}
	if err := p.Scale(5, nil, 16); err != nil {
		t.Fatal(err)
	}
	if p.Roles != (Roles{Writeonly: 1, Readonly: 3, Dual: 1}) || p.Cohorts != nil {
		t.Fatalf("scale keeps writers, clears cohorts: %+v", p)
	}
	if err := p.Scale(1, nil, 16); err == nil || !strings.Contains(err.Error(), "cannot keep the pool's 2 write-capable nodes") {
		t.Fatalf("below the writers: %v", err)
	}
	if err := p.Scale(0, nil, 16); err != nil || !p.Suspended || p.Size() != 0 || p.Roles.Total() != 5 {
		t.Fatalf("scale to 0 stops and keeps the distribution: %+v %v", p, err)
	}
	if err := p.Scale(2, &Roles{Dual: 1, Readonly: 1}, 16); err != nil || p.Suspended || p.Size() != 2 {
		t.Fatalf("scale with a distribution wakes the pool: %+v %v", p, err)
	}
	p.Band = &band.Band{Min: 2, Max: 4}
	if err := p.Scale(5, nil, 16); !api.HasCode(err, api.CodeOutsideBand) {
		t.Fatalf("outside the band: %v", err)
	}
	if err := p.Scale(0, nil, 16); !api.HasCode(err, api.CodeOutsideBand) {
		t.Fatalf("a banded pool is not stopped by scale: %v", err)
	}
	if err := p.Scale(3, &Roles{Writeonly: 3}, 16); !api.HasCode(err, api.CodeInvalidBand) {
		t.Fatalf("writers above minNodes: %v", err)
	}
	if err := p.Scale(-1, nil, 16); !api.HasCode(err, api.CodeInvalidRequest) {
		t.Fatalf("negative target: %v", err)
	}
}

func TestResume(t *testing.T) {
	p := &Pool{Key: key(), Roles: Roles{Writeonly: 1, Readonly: 4}}
	p.Suspend()
	p.Resume()
	if p.Size() != 5 {
		t.Fatalf("unbanded pool resumes at its old size: %+v", p)
	}
	p.Band = &band.Band{Min: 2, Max: 6}
	p.Suspend()
	p.Resume()
	if p.Roles != (Roles{Writeonly: 1, Readonly: 1}) || p.Size() != 2 {
		t.Fatalf("banded pool resumes at minNodes with writers kept: %+v", p)
	}
	p.Resume() // running: nothing changes
	if p.Size() != 2 {
		t.Fatalf("resume of a running pool moved it: %+v", p)
	}
}

func TestQuota(t *testing.T) {
	p := &Pool{Key: key(), Roles: Roles{Readonly: 3}}
	if CheckQuota(p, 2, 0) != nil || CheckQuota(p, 2, 5) != nil {
		t.Fatal("within quota refused")
	}
	if err := CheckQuota(p, 3, 5); !api.HasCode(err, api.CodeQuotaExceeded) {
		t.Fatalf("over quota: %v", err)
	}
}

func TestNames(t *testing.T) {
	for _, ok := range []string{"a", "acme_sales", "bi-2", "x.y", strings.Repeat("a", 63)} {
		if ValidateName("pool", ok) != nil {
			t.Errorf("%q refused", ok)
		}
	}
	for _, bad := range []string{"", "-a", "a/b", "a b", "ä", strings.Repeat("a", 64), "a\x00"} {
		if ValidateName("pool", bad) == nil {
			t.Errorf("%q accepted", bad)
		}
	}
	if _, err := ParseID("acme/db"); err == nil {
		t.Error("two-part id accepted")
	}
	if k, err := ParseID("acme/db/p"); err != nil || k != (Key{"acme", "db", "p"}) {
		t.Errorf("ParseID: %v %v", k, err)
	}
}
