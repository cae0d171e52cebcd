package provider

import (
	"context"
	"errors"
	"time"

	"github.com/hashicorp/terraform-plugin-framework/attr"
	"github.com/hashicorp/terraform-plugin-framework/datasource"
	"github.com/hashicorp/terraform-plugin-framework/datasource/schema"
	"github.com/hashicorp/terraform-plugin-framework/diag"
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

// poolDataModel is qod_pool: the pool and what the autoscale sweep made of
// it.
type poolDataModel struct {
	poolModel
	Autoscale types.Object `tfsdk:"autoscale"`
}

// autoscaleModel is the qod_pool autoscale block: GET /api/pool/autoscaleStatus.
type autoscaleModel struct {
	Enabled            types.Bool    `tfsdk:"enabled"`
	SweptAt            types.String  `tfsdk:"swept_at"`
	Decision           types.String  `tfsdk:"decision"`
	Rule               types.String  `tfsdk:"rule"`
	RuleCode           types.String  `tfsdk:"rule_code"`
	Demand             types.Float64 `tfsdk:"demand"`
	Capacity           types.Float64 `tfsdk:"capacity"`
	Utilization        types.Float64 `tfsdk:"utilization"`
	OutStreak          types.Int64   `tfsdk:"out_streak"`
	OutStreakNeeded    types.Int64   `tfsdk:"out_streak_needed"`
	InStreak           types.Int64   `tfsdk:"in_streak"`
	InStreakNeeded     types.Int64   `tfsdk:"in_streak_needed"`
	OutCooldownLeftSec types.Int64   `tfsdk:"out_cooldown_left_sec"`
	InCooldownLeftSec  types.Int64   `tfsdk:"in_cooldown_left_sec"`
	Failures           types.Int64   `tfsdk:"failures"`
	BackoffSweepsLeft  types.Int64   `tfsdk:"backoff_sweeps_left"`
	UnroutableReaders  types.Int64   `tfsdk:"unroutable_readers"`
}

func autoscaleAttributes() map[string]schema.Attribute {
	i := func(d string) schema.Attribute { return schema.Int64Attribute{Computed: true, MarkdownDescription: d} }
	f := func(d string) schema.Attribute {
		return schema.Float64Attribute{Computed: true, MarkdownDescription: d}
	}
	str := func(d string) schema.Attribute { return schema.StringAttribute{Computed: true, MarkdownDescription: d} }
	return map[string]schema.Attribute{
		"enabled":               schema.BoolAttribute{Computed: true, MarkdownDescription: "The server's kill switch (`quack-on-demand.autoscale.enabled`)."},
		"swept_at":              str("When the last sweep that decided on this pool ran (RFC 3339); null before the first."),
		"decision":              str("What that sweep decided: `out`, `in` or `hold`."),
		"rule":                  str("Why, in words: the rule that moved the pool or held it still, e.g. `in out cooldown: 42 s left`, `at maxNodes 6`, `last reader: ...`."),
		"rule_code":             str("The same rule as a stable code, e.g. `out_cooldown`, `at_max_nodes`, `last_reader`, `no_band`, `disabled`."),
		"demand":                f("Average statements in flight over the load window."),
		"capacity":              f("Statements the routable read-capable nodes take at once; 0 when unknown."),
		"utilization":           f("Demand over capacity; null while capacity is unknown."),
		"out_streak":            i("Consecutive sweeps at or above the high watermark."),
		"out_streak_needed":     i("Sweeps the out streak needs before a node is added (`outStreak`)."),
		"in_streak":             i("Consecutive sweeps at or below the low watermark."),
		"in_streak_needed":      i("Sweeps the in streak needs before a node is removed (`inStreak`)."),
		"out_cooldown_left_sec": i("Seconds until a scale-out is allowed again (after any action or a resume)."),
		"in_cooldown_left_sec":  i("Seconds until a scale-in is allowed again."),
		"failures":              i("Failed actions in a row (three start failure backoff)."),
		"backoff_sweeps_left":   i("Sweeps the pool still sits out after repeated failures."),
		"unroutable_readers":    i("Read-capable nodes the node backend reports as not routable; they carry no capacity."),
	}
}

func autoscaleModelOf(st *api.AutoscaleStatus) autoscaleModel {
	m := autoscaleModel{
		Enabled: types.BoolValue(st.Enabled), SweptAt: types.StringNull(), Decision: types.StringValue(st.Decision),
		Rule: types.StringValue(st.Rule), RuleCode: types.StringValue(st.RuleCode),
		Demand: types.Float64Value(st.Demand), Capacity: types.Float64Value(st.Capacity), Utilization: types.Float64Null(),
		OutStreak: types.Int64Value(int64(st.OutStreak.Count)), OutStreakNeeded: types.Int64Value(int64(st.OutStreak.Needed)),
		InStreak: types.Int64Value(int64(st.InStreak.Count)), InStreakNeeded: types.Int64Value(int64(st.InStreak.Needed)),
		OutCooldownLeftSec: types.Int64Value(int64(st.OutCooldownLeft)), InCooldownLeftSec: types.Int64Value(int64(st.InCooldownLeft)),
		Failures: types.Int64Value(int64(st.Failures)), BackoffSweepsLeft: types.Int64Value(int64(st.BackoffSweepsLeft)),
		UnroutableReaders: types.Int64Value(int64(st.UnroutableReaders)),
	}
	if st.SweptAt != nil {
		m.SweptAt = types.StringValue(st.SweptAt.UTC().Format(time.RFC3339))
	}
	if st.Utilization != nil {
		m.Utilization = types.Float64Value(*st.Utilization)
	}
	return m
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
	attrs["autoscale"] = schema.SingleNestedAttribute{
		Computed:            true,
		MarkdownDescription: "What the last autoscale sweep saw and decided for the pool, and why; streaks, cooldowns and backoff as they stand at read time.",
		Attributes:          autoscaleAttributes(),
	}
	resp.Schema = schema.Schema{
		MarkdownDescription: "Reads one QoD pool: its size, role distribution, autoscale band, and the autoscaler's explanation of its last decision.",
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
	var m poolDataModel
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
	st, err := d.data.client.AutoscaleStatus(ctx, p.Tenant, p.TenantDB, p.Pool)
	if err != nil {
		resp.Diagnostics.AddError("Cannot read the pool's autoscale status", err.Error())
		return
	}
	out := poolDataModel{poolModel: poolModelOf(p)}
	var diags diag.Diagnostics
	out.Autoscale, diags = types.ObjectValueFrom(ctx, autoscaleObjectType(), autoscaleModelOf(st))
	resp.Diagnostics.Append(diags...)
	if resp.Diagnostics.HasError() {
		return
	}
	resp.Diagnostics.Append(resp.State.Set(ctx, &out)...)
}

func autoscaleObjectType() map[string]attr.Type {
	types := map[string]attr.Type{}
	for name, a := range autoscaleAttributes() {
		types[name] = a.GetType()
	}
	return types
}
