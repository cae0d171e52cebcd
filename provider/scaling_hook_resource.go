package provider

import (
	"context"
	"errors"

	"github.com/hashicorp/terraform-plugin-framework-validators/stringvalidator"
	"github.com/hashicorp/terraform-plugin-framework/attr"
	"github.com/hashicorp/terraform-plugin-framework/diag"
	"github.com/hashicorp/terraform-plugin-framework/path"
	"github.com/hashicorp/terraform-plugin-framework/resource"
	"github.com/hashicorp/terraform-plugin-framework/resource/schema"
	"github.com/hashicorp/terraform-plugin-framework/resource/schema/booldefault"
	"github.com/hashicorp/terraform-plugin-framework/resource/schema/planmodifier"
	"github.com/hashicorp/terraform-plugin-framework/resource/schema/stringplanmodifier"
	"github.com/hashicorp/terraform-plugin-framework/schema/validator"
	"github.com/hashicorp/terraform-plugin-framework/types"

	"github.com/qodaperio/autoscale/internal/api"
	"github.com/qodaperio/autoscale/internal/client"
	"github.com/qodaperio/autoscale/internal/hook"
)

var (
	_ resource.ResourceWithConfigure      = (*scalingHookResource)(nil)
	_ resource.ResourceWithImportState    = (*scalingHookResource)(nil)
	_ resource.ResourceWithValidateConfig = (*scalingHookResource)(nil)
	_ resource.ResourceWithModifyPlan     = (*scalingHookResource)(nil)
)

// NewScalingHookResource is the aperio_scaling_hook resource.
func NewScalingHookResource() resource.Resource { return &scalingHookResource{} }

type scalingHookResource struct {
	data *aperioData
}

// scalingHookModel is the resource's configuration and state. secret_wo is
// write-only: it is read from the configuration and never stored.
type scalingHookModel struct {
	ID                types.String  `tfsdk:"id"`
	Hostname          types.String  `tfsdk:"hostname"`
	URL               types.String  `tfsdk:"url"`
	Min               types.Int64   `tfsdk:"min"`
	Max               types.Int64   `tfsdk:"max"`
	ColdStart         types.String  `tfsdk:"cold_start"`
	TargetUtilization types.Float64 `tfsdk:"target_utilization"`
	Window            types.String  `tfsdk:"window"`
	Cooldown          types.String  `tfsdk:"cooldown"`
	IdleTimeout       types.String  `tfsdk:"idle_timeout"`
	MaxConcurrent     types.Int64   `tfsdk:"max_concurrent"`
	SecretWO          types.String  `tfsdk:"secret_wo"`
	SecretWOVersion   types.Int64   `tfsdk:"secret_wo_version"`
	Secret            types.String  `tfsdk:"secret"`
	Armed             types.Bool    `tfsdk:"armed"`
	Org               types.String  `tfsdk:"org"`
	SecretSet         types.Bool    `tfsdk:"secret_set"`
}

func optInt(v types.Int64) *int {
	if v.IsNull() || v.IsUnknown() {
		return nil
	}
	n := int(v.ValueInt64())
	return &n
}

func optStr(v types.String) string {
	if v.IsNull() || v.IsUnknown() {
		return ""
	}
	return v.ValueString()
}

// declaration is the model as the shared rules and the API take it.
func (m *scalingHookModel) declaration() hook.Declaration {
	d := hook.Declaration{Hostname: m.Hostname.ValueString(), URL: m.URL.ValueString(), Min: optInt(m.Min), Max: optInt(m.Max),
		ColdStart: optStr(m.ColdStart), Window: optStr(m.Window), Cooldown: optStr(m.Cooldown), IdleTimeout: optStr(m.IdleTimeout),
		MaxConcurrent: optInt(m.MaxConcurrent)}
	if !m.TargetUtilization.IsNull() && !m.TargetUtilization.IsUnknown() {
		v := m.TargetUtilization.ValueFloat64()
		d.TargetUtilization = &v
	}
	return d
}

// known reports whether every attribute the rules read is known.
func (m *scalingHookModel) known() bool {
	for _, v := range []attr.Value{m.Hostname, m.URL, m.Min, m.Max, m.ColdStart, m.TargetUtilization, m.Window, m.Cooldown, m.IdleTimeout, m.MaxConcurrent} {
		if v.IsUnknown() {
			return false
		}
	}
	return true
}

// fill copies the server's record into the model.
func (m *scalingHookModel) fill(r *api.ScalingRecord) {
	m.ID = types.StringValue(r.ID)
	m.Hostname = types.StringValue(r.Hostname)
	m.URL = types.StringValue(r.URL)
	m.Min = types.Int64Value(int64(r.Min))
	m.Max = types.Int64Value(int64(r.Max))
	m.ColdStart = types.StringValue(r.ColdStart)
	m.TargetUtilization = types.Float64Value(r.TargetUtilization)
	m.Window = types.StringValue(r.Window)
	m.Cooldown = types.StringValue(r.Cooldown)
	m.IdleTimeout = types.StringValue(r.IdleTimeout)
	m.MaxConcurrent = types.Int64Value(int64(r.MaxConcurrent))
	m.Armed = types.BoolValue(r.Armed)
	m.Org = types.StringValue(r.Org)
	m.SecretSet = types.BoolValue(r.SecretSet)
}

func (r *scalingHookResource) Metadata(_ context.Context, req resource.MetadataRequest, resp *resource.MetadataResponse) {
	resp.TypeName = req.ProviderTypeName + "_scaling_hook"
}

func (r *scalingHookResource) Schema(_ context.Context, _ resource.SchemaRequest, resp *resource.SchemaResponse) {
	dur := func(desc string) schema.StringAttribute {
		return schema.StringAttribute{Optional: true, Computed: true, MarkdownDescription: desc + " A Go duration such as `45s` or `1m30s`.",
			PlanModifiers: []planmodifier.String{stringplanmodifier.UseStateForUnknown()}}
	}
	resp.Schema = schema.Schema{
		MarkdownDescription: "A scaling hook for one hostname: the URL the server calls, with the desired number of instances, when the hostname's " +
			"clients stay saturated (`scale_out`), stay idle (`scale_in`), or a request arrives while none is running (`cold_start`). " +
			"Deleting the resource disarms the hook.",
		Attributes: map[string]schema.Attribute{
			"id": schema.StringAttribute{Computed: true, MarkdownDescription: "The record's id (`sh_...`).",
				PlanModifiers: []planmodifier.String{stringplanmodifier.UseStateForUnknown()}},
			"hostname": schema.StringAttribute{Required: true, MarkdownDescription: "The hostname the hook scales, e.g. `app.example.com`. Changing it replaces the resource.",
				PlanModifiers: []planmodifier.String{stringplanmodifier.RequiresReplace()}, Validators: []validator.String{hostnameValidator{}}},
			"url": schema.StringAttribute{Required: true, MarkdownDescription: "The endpoint the server POSTs to. `https://` and a public address, unless the server's operator allows more; " +
				"a refused destination fails `terraform plan`."},
			"min":        schema.Int64Attribute{Optional: true, Computed: true, MarkdownDescription: "The fewest instances the server asks for; 0 lets a request cold start the hostname. Default 0."},
			"max":        schema.Int64Attribute{Required: true, MarkdownDescription: "The most instances the server ever asks for (1 to 10000)."},
			"cold_start": dur("How long a request may be held while the hostname starts (1s to 10m). Default `30s`."),
			"target_utilization": schema.Float64Attribute{Optional: true, Computed: true,
				MarkdownDescription: "Scale out when in-flight requests over announced capacity stay at or above this for a `window`; scale in below half of it for four windows. Above 0, at most 1. Default 0.8."},
			"window":         dur("How long utilization must stay above the target before a scale-out (1s to 1h). Default `15s`."),
			"cooldown":       dur("The least time between two calls for this hostname (0s to 24h). Default `60s`."),
			"idle_timeout":   dur("How long a client waits with nothing arriving before it retires itself (0s: never). Default `5m`."),
			"max_concurrent": schema.Int64Attribute{Optional: true, Computed: true, MarkdownDescription: "Concurrency one instance handles; 0 announces none. Default 0."},
			"secret_wo": schema.StringAttribute{Optional: true, Sensitive: true, WriteOnly: true,
				MarkdownDescription: "Sent as `Authorization: Bearer` with every call. Write-only: never stored in state (Terraform 1.11+). Sent when the resource is created and whenever `secret_wo_version` changes.",
				Validators:          []validator.String{stringvalidator.ConflictsWith(path.MatchRoot("secret"))}},
			"secret_wo_version": schema.Int64Attribute{Optional: true, MarkdownDescription: "Change it to send a new `secret_wo`."},
			"secret": schema.StringAttribute{Optional: true, Sensitive: true,
				MarkdownDescription: "The same as `secret_wo` for Terraform before 1.11; it is kept (sensitive) in state. Prefer `secret_wo`."},
			"armed": schema.BoolAttribute{Optional: true, Computed: true, Default: booldefault.StaticBool(true),
				MarkdownDescription: "Whether the hook may be called. After five failed calls in a row the server disarms it; the plan then shows `armed` going back to true, and `apply` re-arms it."},
			"org":        schema.StringAttribute{Computed: true, MarkdownDescription: "The organization the record belongs to (empty for the operator)."},
			"secret_set": schema.BoolAttribute{Computed: true, MarkdownDescription: "Whether the server holds a secret for the hook. The secret itself is never returned."},
		},
	}
}

func (r *scalingHookResource) Configure(_ context.Context, req resource.ConfigureRequest, resp *resource.ConfigureResponse) {
	data, err := aperioDataFrom(req.ProviderData)
	if err != nil {
		resp.Diagnostics.AddError("Provider misconfigured", err.Error())
		return
	}
	r.data = data
}

// hookError shows a rule's error on the attribute it names.
func hookError(diags *diag.Diagnostics, err error) {
	var ae *api.Error
	if errors.As(err, &ae) {
		field, _, _ := cutField(ae.Message)
		summary := "Invalid scaling hook"
		if ae.Code == api.CodeDestinationRefused {
			summary = "Destination refused by the server's outbound fence"
		}
		if field != "" {
			diags.AddAttributeError(path.Root(field), summary, ae.Message)
			return
		}
		diags.AddError(summary, ae.Message)
		return
	}
	var ce *client.APIError
	if errors.As(err, &ce) {
		hookError(diags, &api.Error{Code: ce.Code, Message: ce.Message})
		return
	}
	diags.AddError("Scaling hook request failed", err.Error())
}

// cutField finds the attribute a rule's message starts with.
func cutField(msg string) (string, string, bool) {
	for _, f := range []string{"hostname", "url", "min", "max_concurrent", "max", "cold_start", "target_utilization", "window", "cooldown", "idle_timeout", "secret"} {
		if len(msg) > len(f) && msg[:len(f)] == f && (msg[len(f)] == ' ' || msg[len(f)] == ':') {
			return f, msg[len(f):], true
		}
	}
	return "", msg, false
}

// ValidateConfig runs the shared static rules when every value is known.
func (r *scalingHookResource) ValidateConfig(ctx context.Context, req resource.ValidateConfigRequest, resp *resource.ValidateConfigResponse) {
	var m scalingHookModel
	resp.Diagnostics.Append(req.Config.Get(ctx, &m)...)
	if resp.Diagnostics.HasError() || !m.known() || m.Max.IsNull() {
		return
	}
	if _, err := m.declaration().Validate(); err != nil {
		hookError(&resp.Diagnostics, err)
	}
}

// ModifyPlan asks the server to check the planned declaration against every
// rule and its live outbound fence, so a refused destination fails plan.
func (r *scalingHookResource) ModifyPlan(ctx context.Context, req resource.ModifyPlanRequest, resp *resource.ModifyPlanResponse) {
	if req.Plan.Raw.IsNull() || r.data == nil {
		return
	}
	var m scalingHookModel
	resp.Diagnostics.Append(req.Config.Get(ctx, &m)...)
	if resp.Diagnostics.HasError() || !m.known() {
		return
	}
	if _, err := r.data.client.ValidateScaling(ctx, client.ScalingRequest{Declaration: m.declaration()}); err != nil {
		hookError(&resp.Diagnostics, err)
	}
}

// put declares the hook from the plan; secret is the secret to send (nil:
// keep the stored one).
func (r *scalingHookResource) put(ctx context.Context, plan *scalingHookModel, secret *string, diags *diag.Diagnostics) {
	rec, err := r.data.client.PutScaling(ctx, client.ScalingRequest{Declaration: plan.declaration(), Secret: secret})
	if err != nil {
		hookError(diags, err)
		return
	}
	if rec.Notice != "" {
		diags.AddWarning("Scaling is off on the server", rec.Notice)
	}
	plan.fill(rec)
}

func (r *scalingHookResource) Create(ctx context.Context, req resource.CreateRequest, resp *resource.CreateResponse) {
	var plan, config scalingHookModel
	resp.Diagnostics.Append(req.Plan.Get(ctx, &plan)...)
	resp.Diagnostics.Append(req.Config.Get(ctx, &config)...)
	if resp.Diagnostics.HasError() {
		return
	}
	var secret *string
	switch {
	case !config.SecretWO.IsNull():
		v := config.SecretWO.ValueString()
		secret = &v
	case !plan.Secret.IsNull():
		v := plan.Secret.ValueString()
		secret = &v
	}
	r.put(ctx, &plan, secret, &resp.Diagnostics)
	if resp.Diagnostics.HasError() {
		return
	}
	plan.SecretWO = types.StringNull()
	resp.Diagnostics.Append(resp.State.Set(ctx, &plan)...)
}

func (r *scalingHookResource) Read(ctx context.Context, req resource.ReadRequest, resp *resource.ReadResponse) {
	var state scalingHookModel
	resp.Diagnostics.Append(req.State.Get(ctx, &state)...)
	if resp.Diagnostics.HasError() {
		return
	}
	rec, err := r.data.client.GetScaling(ctx, state.ID.ValueString())
	if errors.Is(err, client.ErrNotFound) {
		resp.State.RemoveResource(ctx) // disarmed or pruned: the plan shows it again
		return
	}
	if err != nil {
		resp.Diagnostics.AddError("Cannot read the scaling hook", err.Error())
		return
	}
	state.fill(rec)
	resp.Diagnostics.Append(resp.State.Set(ctx, &state)...)
}

func (r *scalingHookResource) Update(ctx context.Context, req resource.UpdateRequest, resp *resource.UpdateResponse) {
	var plan, state, config scalingHookModel
	resp.Diagnostics.Append(req.Plan.Get(ctx, &plan)...)
	resp.Diagnostics.Append(req.State.Get(ctx, &state)...)
	resp.Diagnostics.Append(req.Config.Get(ctx, &config)...)
	if resp.Diagnostics.HasError() {
		return
	}
	var secret *string
	switch {
	case !config.SecretWO.IsNull() && !plan.SecretWOVersion.Equal(state.SecretWOVersion):
		v := config.SecretWO.ValueString()
		secret = &v
	case !plan.Secret.Equal(state.Secret):
		v := plan.Secret.ValueString() // null: "" removes it
		secret = &v
	}
	r.put(ctx, &plan, secret, &resp.Diagnostics)
	if resp.Diagnostics.HasError() {
		return
	}
	plan.SecretWO = types.StringNull()
	resp.Diagnostics.Append(resp.State.Set(ctx, &plan)...)
}

func (r *scalingHookResource) Delete(ctx context.Context, req resource.DeleteRequest, resp *resource.DeleteResponse) {
	var state scalingHookModel
	resp.Diagnostics.Append(req.State.Get(ctx, &state)...)
	if resp.Diagnostics.HasError() {
		return
	}
	err := r.data.client.DisarmScaling(ctx, state.ID.ValueString())
	if err != nil && !errors.Is(err, client.ErrNotFound) {
		resp.Diagnostics.AddError("Cannot disarm the scaling hook", err.Error())
	}
}

// ImportState takes the record's id or its hostname.
func (r *scalingHookResource) ImportState(ctx context.Context, req resource.ImportStateRequest, resp *resource.ImportStateResponse) {
	rec, err := r.data.client.GetScaling(ctx, req.ID)
	if errors.Is(err, client.ErrNotFound) {
		resp.Diagnostics.AddError("Scaling hook not found", "No scaling hook with id or hostname "+req.ID+" is visible to this key.")
		return
	}
	if err != nil {
		resp.Diagnostics.AddError("Cannot read the scaling hook", err.Error())
		return
	}
	var m scalingHookModel
	m.fill(rec)
	m.SecretWO, m.SecretWOVersion, m.Secret = types.StringNull(), types.Int64Null(), types.StringNull()
	resp.Diagnostics.Append(resp.State.Set(ctx, &m)...)
}

// hostnameValidator runs the shared hostname rule at validation time.
type hostnameValidator struct{}

func (hostnameValidator) Description(context.Context) string {
	return "a DNS name: lowercase letters, digits, '-' and '.'"
}
func (v hostnameValidator) MarkdownDescription(ctx context.Context) string { return v.Description(ctx) }
func (hostnameValidator) ValidateString(_ context.Context, req validator.StringRequest, resp *validator.StringResponse) {
	if req.ConfigValue.IsNull() || req.ConfigValue.IsUnknown() {
		return
	}
	if err := hook.ValidHostname(req.ConfigValue.ValueString()); err != nil {
		var ae *api.Error
		if errors.As(err, &ae) {
			resp.Diagnostics.AddAttributeError(req.Path, "Invalid hostname", ae.Message)
		}
	}
}
