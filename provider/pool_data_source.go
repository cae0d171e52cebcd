package provider

import (
	"context"
	"errors"

	"github.com/hashicorp/terraform-plugin-framework/attr"
	"github.com/hashicorp/terraform-plugin-framework/datasource"
	"github.com/hashicorp/terraform-plugin-framework/datasource/schema"
	"github.com/hashicorp/terraform-plugin-framework/path"
	"github.com/hashicorp/terraform-plugin-framework/schema/validator"
	"github.com/hashicorp/terraform-plugin-framework/types"

	"github.com/qodaperio/autoscale/internal/api"
	"github.com/qodaperio/autoscale/internal/client"
)

var _ datasource.DataSourceWithConfigure = (*poolDataSource)(nil)

// NewPoolDataSource is the qod_pool data source.
func NewPoolDataSource() datasource.DataSource { return &poolDataSource{} }

type poolDataSource struct {
	data *qodData
}

// poolModel is one pool as the data sources show it.
type poolModel struct {
	ID                   types.String `tfsdk:"id"`
	Tenant               types.String `tfsdk:"tenant"`
	TenantDB             types.String `tfsdk:"tenant_db"`
	Pool                 types.String `tfsdk:"pool"`
	Size                 types.Int64  `tfsdk:"size"`
	Suspended            types.Bool   `tfsdk:"suspended"`
	Elastic              types.Bool   `tfsdk:"elastic"`
	MinNodes             types.Int64  `tfsdk:"min_nodes"`
	MaxNodes             types.Int64  `tfsdk:"max_nodes"`
	Writeonly            types.Int64  `tfsdk:"writeonly"`
	Readonly             types.Int64  `tfsdk:"readonly"`
	Dual                 types.Int64  `tfsdk:"dual"`
	MaxConcurrentPerNode types.Int64  `tfsdk:"max_concurrent_per_node"`
	Cohorts              types.List   `tfsdk:"cohorts"`
}

func optionalInt(v *int) types.Int64 {
	if v == nil {
		return types.Int64Null()
	}
	return types.Int64Value(int64(*v))
}

func poolModelOf(p *api.Pool) poolModel {
	names := make([]attr.Value, 0, len(p.Cohorts))
	for _, c := range p.Cohorts {
		names = append(names, types.StringValue(c.Name))
	}
	return poolModel{
		ID: types.StringValue(p.ID), Tenant: types.StringValue(p.Tenant), TenantDB: types.StringValue(p.TenantDB),
		Pool: types.StringValue(p.Pool), Size: types.Int64Value(int64(p.Size)), Suspended: types.BoolValue(p.Suspended),
		Elastic: types.BoolValue(p.Elastic), MinNodes: optionalInt(p.MinNodes), MaxNodes: optionalInt(p.MaxNodes),
		Writeonly:            types.Int64Value(int64(p.RoleDistribution.Writeonly)),
		Readonly:             types.Int64Value(int64(p.RoleDistribution.Readonly)),
		Dual:                 types.Int64Value(int64(p.RoleDistribution.Dual)),
		MaxConcurrentPerNode: types.Int64Value(int64(p.MaxConcurrentPerNode)),
		Cohorts:              types.ListValueMust(types.StringType, names),
	}
}

// poolAttributes are the computed attributes of a pool, shared by qod_pool
// and the elements of qod_pools.
func poolAttributes() map[string]schema.Attribute {
	return map[string]schema.Attribute{
		"id":                      schema.StringAttribute{Computed: true, MarkdownDescription: "`tenant/tenant_db/pool`."},
		"tenant":                  schema.StringAttribute{Computed: true, MarkdownDescription: "Owning tenant."},
		"tenant_db":               schema.StringAttribute{Computed: true, MarkdownDescription: "Tenant database."},
		"pool":                    schema.StringAttribute{Computed: true, MarkdownDescription: "Pool name."},
		"size":                    schema.Int64Attribute{Computed: true, MarkdownDescription: "Running nodes; 0 when suspended."},
		"suspended":               schema.BoolAttribute{Computed: true, MarkdownDescription: "Whether the pool is suspended (scaled to zero, role distribution kept)."},
		"elastic":                 schema.BoolAttribute{Computed: true, MarkdownDescription: "Whether the pool has an autoscale band."},
		"min_nodes":               schema.Int64Attribute{Computed: true, MarkdownDescription: "Band floor; null without a band."},
		"max_nodes":               schema.Int64Attribute{Computed: true, MarkdownDescription: "Band ceiling; null without a band."},
		"writeonly":               schema.Int64Attribute{Computed: true, MarkdownDescription: "Write-only nodes in the role distribution."},
		"readonly":                schema.Int64Attribute{Computed: true, MarkdownDescription: "Read-only nodes in the role distribution; the only ones autoscaling adds or removes."},
		"dual":                    schema.Int64Attribute{Computed: true, MarkdownDescription: "Read-write nodes in the role distribution."},
		"max_concurrent_per_node": schema.Int64Attribute{Computed: true, MarkdownDescription: "Concurrency cap per node; 0 means none (the server then assumes `assumedConcurrencyPerNode`)."},
		"cohorts":                 schema.ListAttribute{Computed: true, ElementType: types.StringType, MarkdownDescription: "Names of the pool's authored cohorts. A pool with cohorts cannot have a band."},
	}
}

func (d *poolDataSource) Metadata(_ context.Context, req datasource.MetadataRequest, resp *datasource.MetadataResponse) {
	resp.TypeName = req.ProviderTypeName + "_pool"
}

func (d *poolDataSource) Schema(_ context.Context, _ datasource.SchemaRequest, resp *datasource.SchemaResponse) {
	attrs := poolAttributes()
	for _, name := range []string{"tenant", "tenant_db", "pool"} {
		a := attrs[name].(schema.StringAttribute)
		a.Computed, a.Required = false, true
		a.Validators = []validator.String{poolNameValidator{}}
		attrs[name] = a
	}
	resp.Schema = schema.Schema{
		MarkdownDescription: "Reads one QoD pool: its size, role distribution and autoscale band.",
		Attributes:          attrs,
	}
}

func (d *poolDataSource) Configure(_ context.Context, req datasource.ConfigureRequest, resp *datasource.ConfigureResponse) {
	data, err := qodDataFrom(req.ProviderData)
	if err != nil {
		resp.Diagnostics.AddError("Provider misconfigured", err.Error())
		return
	}
	d.data = data
}

func (d *poolDataSource) Read(ctx context.Context, req datasource.ReadRequest, resp *datasource.ReadResponse) {
	var m poolModel
	resp.Diagnostics.Append(req.Config.Get(ctx, &m)...)
	if resp.Diagnostics.HasError() {
		return
	}
	p, err := d.data.client.GetPool(ctx, m.Tenant.ValueString(), m.TenantDB.ValueString(), m.Pool.ValueString())
	if errors.Is(err, client.ErrNotFound) {
		resp.Diagnostics.AddAttributeError(path.Root("pool"), "Pool not found", err.Error())
		return
	}
	if err != nil {
		resp.Diagnostics.AddError("Cannot read the pool", err.Error())
		return
	}
	out := poolModelOf(p)
	resp.Diagnostics.Append(resp.State.Set(ctx, &out)...)
}
