package apiserver_test

import (
	"context"
	"testing"

	"github.com/qodaperio/autoscale/apiserver/apiservertest"
	"github.com/qodaperio/autoscale/internal/api"
)

// The API's round trips over loopback through the same client the provider
// uses, against the SQLite store (synchronous=FULL: every write is fsynced).
// Allocations count both ends, client and server, since they share the
// process.

func benchServer(b *testing.B) (*apiservertest.Instance, api.PoolRef) {
	b.Helper()
	srv, err := apiservertest.Start(apiservertest.Options{})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(srv.Close)
	ref := api.PoolRef{Tenant: "acme", TenantDB: "acme_sales", Pool: "bi"}
	two := 2
	if _, err := srv.Client.CreatePool(context.Background(), api.CreatePoolRequest{PoolRef: ref, Size: &two}); err != nil {
		b.Fatal(err)
	}
	return srv, ref
}

func BenchmarkSetAutoscale(b *testing.B) {
	srv, ref := benchServer(b)
	ctx := context.Background()
	minN, maxs := 2, [2]int{6, 8}
	b.ReportAllocs()
	for i := 0; b.Loop(); i++ {
		maxN := maxs[i%2]
		if _, err := srv.Client.SetAutoscale(ctx, api.SetAutoscaleRequest{PoolRef: ref, MinNodes: &minN, MaxNodes: &maxN}); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkGetPool(b *testing.B) {
	srv, ref := benchServer(b)
	ctx := context.Background()
	b.ReportAllocs()
	for b.Loop() {
		if _, err := srv.Client.GetPool(ctx, ref.Tenant, ref.TenantDB, ref.Pool); err != nil {
			b.Fatal(err)
		}
	}
}
