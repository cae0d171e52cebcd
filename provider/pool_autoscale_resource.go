package provider

import (
	"context"
	"errors"
	"fmt"

	"github.com/hashicorp/terraform-plugin-framework/diag"
	"github.com/hashicorp/terraform-plugin-framework/path"
	"github.com/hashicorp/terraform-plugin-framework/resource"
	"github.com/hashicorp/terraform-plugin-framework/resource/schema"
	"github.com/hashicorp/terraform-plugin-framework/resource/schema/planmodifier"
	"github.com/hashicorp/terraform-plugin-framework/resource/schema/stringplanmodifier"
	"github.com/hashicorp/terraform-plugin-framework/schema/validator"
	"github.com/hashicorp/terraform-plugin-framework/tfsdk"
	"github.com/hashicorp/terraform-plugin-framework/types"

	"github.com/qodaperio/autoscale/internal/api"
	"github.com/qodaperio/autoscale/internal/band"
	"github.com/qodaperio/autoscale/internal/client"
	"github.com/qodaperio/autoscale/internal/pool"
)

var (
	_ resource.ResourceWithConfigure      = (*poolAutoscaleResource)(nil)
	_ resource.ResourceWithImportState    = (*poolAutoscaleResource)(nil)
	_ resource.ResourceWithValidateConfig = (*poolAutoscaleResource)(nil)
	_ resource.ResourceWithModifyPlan     = (*poolAutoscaleResource)(nil)
)

// NewPoolAutoscaleResource is the qod_pool_autoscale resource.
func NewPoolAutoscaleResource() resource.Resource { return &poolAutoscaleResource{} }

type poolAutoscaleResource struct {
	data *qodData
}

// poolAutoscaleModel is the resource's state.
type poolAutoscaleModel struct {
	ID       types.String `tfsdk:"id"`
	Tenant   types.String `tfsdk:"tenant"`
	TenantDB types.String `tfsdk:"tenant_db"`
	Pool     types.String `tfsdk:"pool"`
	MinNodes types.Int64  `tfsdk:"min_nodes"`
	MaxNodes types.Int64  `tfsdk:"max_nodes"`
	Size     types.Int64  `tfsdk:"size"`
}

func (m *poolAutoscaleModel) key() pool.Key {
	return pool.Key{Tenant: m.Tenant.ValueString(), TenantDB: m.TenantDB.ValueString(), Pool: m.Pool.ValueString()}
}

func (m *poolAutoscaleModel) band() band.Band {
	return band.Band{Min: int(m.MinNodes.ValueInt64()), Max: int(m.MaxNodes.ValueInt64())}
}

// fill copies what the server says into the model.
func (m *poolAutoscaleModel) fill(p *api.Pool) {
	m.ID = types.StringValue(p.ID)
	m.Tenant = types.StringValue(p.Tenant)
	m.TenantDB = types.StringValue(p.TenantDB)
	m.Pool = types.StringValue(p.Pool)
	m.Size = types.Int64Value(int64(p.Size))
	if p.MinNodes != nil && p.MaxNodes != nil {
		m.MinNodes = types.Int64Value(int64(*p.MinNodes))
		m.MaxNodes = types.Int64Value(int64(*p.MaxNodes))
	}
}

func (r *poolAutoscaleResource) Metadata(_ context.Context, req resource.MetadataRequest, resp *resource.MetadataResponse) {
	resp.TypeName = req.ProviderTypeName + "_pool_autoscale"
}

func (r *poolAutoscaleResource) Schema(_ context.Context, _ resource.SchemaRequest, resp *resource.SchemaResponse) {
	identity := func(desc string) schema.StringAttribute {
		return schema.StringAttribute{
			Required:            true,
			MarkdownDescription: desc + " Changing it replaces the resource.",
			PlanModifiers:       []planmodifier.String{stringplanmodifier.RequiresReplace()},
			Validators:          []validator.String{poolNameValidator{}},
		}
	}
	resp.Schema = schema.Schema{
		MarkdownDescription: "The autoscale band of an existing QoD pool: the range of node counts inside which " +
			"the control plane adds and removes read nodes on its own. Creating the resource declares the band, " +
			"destroying it clears the band (the pool stays, at a fixed size). The pool itself is not managed here.",
		Attributes: map[string]schema.Attribute{
			"id": schema.StringAttribute{
				Computed:            true,
				MarkdownDescription: "The pool's id, `tenant/tenant_db/pool`; also the import id.",
				PlanModifiers:       []planmodifier.String{stringplanmodifier.UseStateForUnknown()},
			},
			"tenant":    identity("Tenant that owns the pool."),
			"tenant_db": identity("Tenant database the pool serves."),
			"pool":      identity("Pool name."),
			"min_nodes": schema.Int64Attribute{
				Required: true,
				MarkdownDescription: "The floor: the pool never shrinks below it. At least 1, at least the pool's " +
					"write-capable nodes (`writeonly + dual`), at most `max_nodes`.",
			},
			"max_nodes": schema.Int64Attribute{
				Required:            true,
				MarkdownDescription: "The ceiling: the pool never grows past it. At most the server's `hardCap` (16 unless the operator changed it).",
			},
			"size": schema.Int64Attribute{
				Computed: true,
				MarkdownDescription: "The pool's node count when last read. It moves on its own inside the band, " +
					"so it is shown, never planned.",
			},
		},
	}
}

func (r *poolAutoscaleResource) Configure(_ context.Context, req resource.ConfigureRequest, resp *resource.ConfigureResponse) {
	d, err := qodDataFrom(req.ProviderData)
	if err != nil {
		resp.Diagnostics.AddError("Provider misconfigured", err.Error())
		return
	}
	r.data = d
}

// bandError reports a band rule on min_nodes (where every rule but 2 is
// about) with the server's exact words.
func bandError(diags interface {
	AddAttributeError(path.Path, string, string)
}, err error) {
	at := path.Root("min_nodes")
	var ae *api.Error
	if errors.As(err, &ae) && ae.Code == api.CodeInvalidBand && len(ae.Message) > 6 && ae.Message[:6] == "rule 2" {
		at = path.Root("max_nodes")
	}
	diags.AddAttributeError(at, "Invalid autoscale band", err.Error())
}

// ValidateConfig runs the rule that needs nothing from the server.
func (r *poolAutoscaleResource) ValidateConfig(ctx context.Context, req resource.ValidateConfigRequest, resp *resource.ValidateConfigResponse) {
	var m poolAutoscaleModel
	resp.Diagnostics.Append(req.Config.Get(ctx, &m)...)
	if resp.Diagnostics.HasError() || m.MinNodes.IsUnknown() || m.MaxNodes.IsUnknown() || m.MinNodes.IsNull() || m.MaxNodes.IsNull() {
		return
	}
	if err := band.CheckBounds(m.band()); err != nil {
		bandError(&resp.Diagnostics, err)
	}
}

// ModifyPlan runs the remaining rules against the live pool and the server's
// settings, so `terraform plan` fails exactly where `apply` would.
func (r *poolAutoscaleResource) ModifyPlan(ctx context.Context, req resource.ModifyPlanRequest, resp *resource.ModifyPlanResponse) {
	if req.Plan.Raw.IsNull() || r.data == nil {
		return // destroy, or provider not configured
	}
	var m poolAutoscaleModel
	resp.Diagnostics.Append(req.Plan.Get(ctx, &m)...)
	if resp.Diagnostics.HasError() {
		return
	}
	for _, v := range []interface{ IsUnknown() bool }{m.Tenant, m.TenantDB, m.Pool, m.MinNodes, m.MaxNodes} {
		if v.IsUnknown() {
			return // checked again at apply, by the server
		}
	}
	k := m.key()
	if k.Validate() != nil {
		return // ValidateConfig has said so already
	}
	cfg, err := r.data.autoscaleConfig(ctx)
	if err != nil {
		resp.Diagnostics.AddError("Cannot read the server's autoscale settings", err.Error())
		return
	}
	p, err := r.data.client.GetPool(ctx, k.Tenant, k.TenantDB, k.Pool)
	if errors.Is(err, client.ErrNotFound) {
		resp.Diagnostics.AddAttributeError(path.Root("pool"), "Pool not found",
			fmt.Sprintf("pool %s does not exist; create it first (POST /api/pool/create), then declare its band", k))
		return
	}
	if err != nil {
		resp.Diagnostics.AddError("Cannot read the pool", err.Error())
		return
	}
	if err := band.Validate(m.band(), cfg.HardCap, bandFacts(p)); err != nil {
		bandError(&resp.Diagnostics, err)
	}
}

// setBand declares the planned band on the server and records the answer
// in state; Create and Update differ only in the words of their error.
func (r *poolAutoscaleResource) setBand(ctx context.Context, plan tfsdk.Plan, state *tfsdk.State, diags *diag.Diagnostics, failure string) {
	var m poolAutoscaleModel
	diags.Append(plan.Get(ctx, &m)...)
	if diags.HasError() {
		return
	}
	k := m.key()
	minN, maxN := int(m.MinNodes.ValueInt64()), int(m.MaxNodes.ValueInt64())
	p, err := r.data.client.SetAutoscale(ctx, api.SetAutoscaleRequest{
		PoolRef:  api.PoolRef{Tenant: k.Tenant, TenantDB: k.TenantDB, Pool: k.Pool},
		MinNodes: &minN, MaxNodes: &maxN,
	})
	if err != nil {
		diags.AddError(failure, err.Error())
		return
	}
	m.fill(p)
	diags.Append(state.Set(ctx, &m)...)
}

func (r *poolAutoscaleResource) Create(ctx context.Context, req resource.CreateRequest, resp *resource.CreateResponse) {
	r.setBand(ctx, req.Plan, &resp.State, &resp.Diagnostics, "Cannot declare the autoscale band")
}

func (r *poolAutoscaleResource) Read(ctx context.Context, req resource.ReadRequest, resp *resource.ReadResponse) {
	var m poolAutoscaleModel
	resp.Diagnostics.Append(req.State.Get(ctx, &m)...)
	if resp.Diagnostics.HasError() {
		return
	}
	k := m.key()
	p, err := r.data.client.GetPool(ctx, k.Tenant, k.TenantDB, k.Pool)
	if errors.Is(err, client.ErrNotFound) || (err == nil && !p.Elastic) {
		// The pool or its band is gone: the band no longer exists, so
		// the plan shows it being declared again.
		resp.State.RemoveResource(ctx)
		return
	}
	if err != nil {
		resp.Diagnostics.AddError("Cannot read the pool", err.Error())
		return
	}
	m.fill(p)
	resp.Diagnostics.Append(resp.State.Set(ctx, &m)...)
}

func (r *poolAutoscaleResource) Update(ctx context.Context, req resource.UpdateRequest, resp *resource.UpdateResponse) {
	r.setBand(ctx, req.Plan, &resp.State, &resp.Diagnostics, "Cannot change the autoscale band")
}

func (r *poolAutoscaleResource) Delete(ctx context.Context, req resource.DeleteRequest, resp *resource.DeleteResponse) {
	var m poolAutoscaleModel
	resp.Diagnostics.Append(req.State.Get(ctx, &m)...)
	if resp.Diagnostics.HasError() {
		return
	}
	k := m.key()
	_, err := r.data.client.SetAutoscale(ctx, api.SetAutoscaleRequest{PoolRef: api.PoolRef{Tenant: k.Tenant, TenantDB: k.TenantDB, Pool: k.Pool}})
	if err != nil && !errors.Is(err, client.ErrNotFound) {
		resp.Diagnostics.AddError("Cannot clear the autoscale band", err.Error())
	}
}

func (r *poolAutoscaleResource) ImportState(ctx context.Context, req resource.ImportStateRequest, resp *resource.ImportStateResponse) {
	k, err := pool.ParseID(req.ID)
	if err != nil {
		resp.Diagnostics.AddError("Invalid import id", err.Error()+"; for example acme/acme_sales/bi")
		return
	}
	resp.Diagnostics.Append(resp.State.SetAttribute(ctx, path.Root("id"), k.String())...)
	resp.Diagnostics.Append(resp.State.SetAttribute(ctx, path.Root("tenant"), k.Tenant)...)
	resp.Diagnostics.Append(resp.State.SetAttribute(ctx, path.Root("tenant_db"), k.TenantDB)...)
	resp.Diagnostics.Append(resp.State.SetAttribute(ctx, path.Root("pool"), k.Pool)...)
}
