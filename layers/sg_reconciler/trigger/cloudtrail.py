"""CloudTrail "AWS API Call via CloudTrail" events that can change what SG Reconciler manages.

Powertools has an EventBridge envelope but no CloudTrail model, so the `detail` of each
event we react to is modelled here, one class per event name, joined in a discriminated
union on `eventName` (the Powertools multiple-model style). Field names follow what
CloudTrail really logs: EC2 writes its Query-API form (lowerCamelCase, lists wrapped in
`{"items": [...]}`, an empty list logged as `{}`), ModifySecurityGroupRules nests its
parameters in `ModifySecurityGroupRulesRequest` with PascalCase keys, and ELBv2 logs plain
camelCase JSON. Every model allows extra fields and only requires what the scope mapping
needs, because CloudTrail adds fields over time and omits empty ones.
"""

from __future__ import annotations

from typing import Annotated, Any, Generic, Literal, TypeVar, get_args

from pydantic import BaseModel, ConfigDict, Field

from sg_reconciler.trigger.envelopes import EventBridgeEnvelope

CLOUDTRAIL_DETAIL_TYPE = "AWS API Call via CloudTrail"
EC2_SOURCE = "aws.ec2"
ELB_SOURCE = "aws.elasticloadbalancing"
EC2_EVENT_SOURCE = "ec2.amazonaws.com"
ELB_EVENT_SOURCE = "elasticloadbalancing.amazonaws.com"
# The classic ELB API logs under the same event source and reuses some event names
# (CreateLoadBalancer, AddTags, ...); its apiVersion tells it apart.
CLASSIC_ELB_API_VERSION = "2012-06-01"

T = TypeVar("T")


class CloudTrailModel(BaseModel):
    """Base of every model here: unknown fields are kept, never rejected."""

    # Built on first use: the planner validates one event's detail with the one model for its
    # eventName (DETAIL_MODELS), so a cold start builds only the models it meets (docs/extending.md).
    model_config = ConfigDict(extra="allow", populate_by_name=True, defer_build=True)


# ---------------------------------------------------------------- caller identity


class SessionIssuer(CloudTrailModel):
    """The role behind temporary credentials; logged as `{}` for IAM users and root."""

    type: str | None = None
    arn: str | None = None
    principalId: str | None = None
    accountId: str | None = None
    userName: str | None = None


class SessionContext(CloudTrailModel):
    sessionIssuer: SessionIssuer | None = None


class UserIdentity(CloudTrailModel):
    """Who made the call (CloudTrail `userIdentity`)."""

    type: str | None = None
    arn: str | None = None
    principalId: str | None = None
    accountId: str | None = None
    invokedBy: str | None = None
    sessionContext: SessionContext | None = None

    @property
    def issuer_arn(self) -> str | None:
        """The IAM role ARN of an assumed-role session; None for IAM users, root and services."""
        context = self.sessionContext
        if context is None or context.sessionIssuer is None:
            return None
        return context.sessionIssuer.arn or None


class CloudTrailDetail(CloudTrailModel):
    """The fields every CloudTrail management event carries (the EventBridge `detail`)."""

    eventID: str
    eventName: str
    eventSource: str
    awsRegion: str
    userIdentity: UserIdentity
    eventVersion: str | None = None
    eventTime: str | None = None
    recipientAccountId: str | None = None
    apiVersion: str | None = None
    errorCode: str | None = None
    errorMessage: str | None = None


# ---------------------------------------------------------------- EC2 shapes


class ItemSet(CloudTrailModel, Generic[T]):
    """EC2's Query-API list: `{"items": [...]}`, or `{}` when the list is empty."""

    items: list[T] = Field(default_factory=list)


class GroupRef(CloudTrailModel):
    groupId: str | None = None


class UserIdGroupPair(CloudTrailModel):
    groupId: str | None = None
    groupName: str | None = None
    userId: str | None = None
    description: str | None = None


class IpRange(CloudTrailModel):
    cidrIp: str | None = None
    description: str | None = None


class Ipv6Range(CloudTrailModel):
    cidrIpv6: str | None = None
    description: str | None = None


class PrefixListRef(CloudTrailModel):
    prefixListId: str | None = None
    description: str | None = None


class IpPermission(CloudTrailModel):
    ipProtocol: str | None = None
    fromPort: int | None = None
    toPort: int | None = None
    groups: ItemSet[UserIdGroupPair] = Field(default_factory=ItemSet[UserIdGroupPair])
    ipRanges: ItemSet[IpRange] = Field(default_factory=ItemSet[IpRange])
    ipv6Ranges: ItemSet[Ipv6Range] = Field(default_factory=ItemSet[Ipv6Range])
    prefixListIds: ItemSet[PrefixListRef] = Field(default_factory=ItemSet[PrefixListRef])


class SecurityGroupRuleItem(CloudTrailModel):
    """A rule as EC2 returns it in `securityGroupRuleSet`."""

    securityGroupRuleId: str | None = None
    groupId: str | None = None
    isEgress: bool | None = None
    ipProtocol: str | None = None
    fromPort: int | None = None
    toPort: int | None = None


class IngressParameters(CloudTrailModel):
    """Authorize/Revoke/UpdateDescriptions ingress: the group by id, or by name (default VPC)."""

    groupId: str | None = None
    groupName: str | None = None
    ipPermissions: ItemSet[IpPermission] = Field(default_factory=ItemSet[IpPermission])


class IngressResponse(CloudTrailModel):
    securityGroupRuleSet: ItemSet[SecurityGroupRuleItem] = Field(
        default_factory=ItemSet[SecurityGroupRuleItem]
    )


class SecurityGroupRuleRequest(CloudTrailModel):
    IpProtocol: str | None = None
    FromPort: int | None = None
    ToPort: int | None = None
    CidrIpv4: str | None = None
    CidrIpv6: str | None = None
    PrefixListId: str | None = None
    ReferencedGroupId: str | None = None
    Description: str | None = None


class SecurityGroupRuleUpdate(CloudTrailModel):
    SecurityGroupRuleId: str | None = None
    SecurityGroupRule: SecurityGroupRuleRequest | None = None


class ModifySecurityGroupRulesRequest(CloudTrailModel):
    """One update is logged as an object, several as a list."""

    GroupId: str
    SecurityGroupRule: SecurityGroupRuleUpdate | list[SecurityGroupRuleUpdate] | None = None


class ModifySecurityGroupRulesParameters(CloudTrailModel):
    ModifySecurityGroupRulesRequest: ModifySecurityGroupRulesRequest


class CreateSecurityGroupParameters(CloudTrailModel):
    groupName: str | None = None
    groupDescription: str | None = None
    vpcId: str | None = None


class CreateSecurityGroupResponse(CloudTrailModel):
    groupId: str | None = None


class DeleteSecurityGroupParameters(CloudTrailModel):
    groupId: str | None = None
    groupName: str | None = None


class ModifyNetworkInterfaceAttributeParameters(CloudTrailModel):
    """`groupSet` is present only when the call replaces the interface's groups."""

    networkInterfaceId: str
    groupSet: ItemSet[GroupRef] | None = None


class ModifyInstanceAttributeParameters(CloudTrailModel):
    """`groupSet` is present only when the call replaces the instance's groups."""

    instanceId: str
    groupSet: ItemSet[GroupRef] | None = None


class ResourceRef(CloudTrailModel):
    resourceId: str | None = None


class TagsParameters(CloudTrailModel):
    """CreateTags and DeleteTags: the resources (any EC2 resource) whose tags changed."""

    resourcesSet: ItemSet[ResourceRef] = Field(default_factory=ItemSet)


# ---------------------------------------------------------------- ELBv2 shapes


class TargetGroupTuple(CloudTrailModel):
    targetGroupArn: str | None = None
    weight: int | None = None


class ForwardConfig(CloudTrailModel):
    targetGroups: list[TargetGroupTuple] = Field(default_factory=list)


class Action(CloudTrailModel):
    """A listener or rule action; forwards name target groups directly or in forwardConfig."""

    type: str | None = None
    targetGroupArn: str | None = None
    forwardConfig: ForwardConfig | None = None

    def target_group_arns(self) -> set[str]:
        arns = {self.targetGroupArn} if self.targetGroupArn else set()
        if self.forwardConfig is not None:
            arns |= {t.targetGroupArn for t in self.forwardConfig.targetGroups if t.targetGroupArn}
        return arns


class LoadBalancerDescription(CloudTrailModel):
    loadBalancerArn: str | None = None
    securityGroups: list[str] = Field(default_factory=list)
    type: str | None = None


class CreateLoadBalancerParameters(CloudTrailModel):
    name: str | None = None
    type: str | None = None
    securityGroups: list[str] = Field(default_factory=list)


class CreateLoadBalancerResponse(CloudTrailModel):
    loadBalancers: list[LoadBalancerDescription] = Field(default_factory=list)


class LoadBalancerParameters(CloudTrailModel):
    loadBalancerArn: str


class SetSecurityGroupsParameters(CloudTrailModel):
    loadBalancerArn: str
    securityGroups: list[str] = Field(default_factory=list)


class SetSecurityGroupsResponse(CloudTrailModel):
    securityGroupIds: list[str] = Field(default_factory=list)


class TargetGroupDescription(CloudTrailModel):
    targetGroupArn: str | None = None
    loadBalancerArns: list[str] = Field(default_factory=list)


class TargetGroupsResponse(CloudTrailModel):
    targetGroups: list[TargetGroupDescription] = Field(default_factory=list)


class CreateTargetGroupParameters(CloudTrailModel):
    name: str | None = None
    protocol: str | None = None
    port: int | None = None
    vpcId: str | None = None
    targetType: str | None = None


class TargetGroupParameters(CloudTrailModel):
    targetGroupArn: str


class ListenerDescription(CloudTrailModel):
    listenerArn: str | None = None
    loadBalancerArn: str | None = None
    defaultActions: list[Action] = Field(default_factory=list)


class ListenersResponse(CloudTrailModel):
    listeners: list[ListenerDescription] = Field(default_factory=list)


class CreateListenerParameters(CloudTrailModel):
    loadBalancerArn: str
    port: int | None = None
    protocol: str | None = None
    defaultActions: list[Action] = Field(default_factory=list)


class ModifyListenerParameters(CloudTrailModel):
    listenerArn: str
    port: int | None = None
    protocol: str | None = None
    defaultActions: list[Action] = Field(default_factory=list)


class ListenerParameters(CloudTrailModel):
    listenerArn: str


class RuleDescription(CloudTrailModel):
    ruleArn: str | None = None
    actions: list[Action] = Field(default_factory=list)


class RulesResponse(CloudTrailModel):
    rules: list[RuleDescription] = Field(default_factory=list)


class CreateRuleParameters(CloudTrailModel):
    listenerArn: str
    actions: list[Action] = Field(default_factory=list)


class ModifyRuleParameters(CloudTrailModel):
    ruleArn: str
    actions: list[Action] = Field(default_factory=list)


class RuleParameters(CloudTrailModel):
    ruleArn: str


class TargetDescription(CloudTrailModel):
    """`id` is an instance id, an IP address or a Lambda ARN, depending on the target type."""

    id: str
    port: int | None = None


class TargetsParameters(CloudTrailModel):
    targetGroupArn: str
    targets: list[TargetDescription] = Field(default_factory=list)


class ElbTag(CloudTrailModel):
    key: str | None = None
    value: str | None = None


class AddTagsParameters(CloudTrailModel):
    resourceArns: list[str]
    tags: list[ElbTag] = Field(default_factory=list)


class RemoveTagsParameters(CloudTrailModel):
    resourceArns: list[str]
    tagKeys: list[str] = Field(default_factory=list)


# ---------------------------------------------------------------- one model per event name


class AuthorizeSecurityGroupIngressDetail(CloudTrailDetail):
    eventName: Literal["AuthorizeSecurityGroupIngress"]
    requestParameters: IngressParameters
    responseElements: IngressResponse | None = None


class RevokeSecurityGroupIngressDetail(CloudTrailDetail):
    eventName: Literal["RevokeSecurityGroupIngress"]
    requestParameters: IngressParameters
    responseElements: dict[str, Any] | None = None


class ModifySecurityGroupRulesDetail(CloudTrailDetail):
    eventName: Literal["ModifySecurityGroupRules"]
    requestParameters: ModifySecurityGroupRulesParameters
    responseElements: dict[str, Any] | None = None


class UpdateSecurityGroupRuleDescriptionsIngressDetail(CloudTrailDetail):
    eventName: Literal["UpdateSecurityGroupRuleDescriptionsIngress"]
    requestParameters: IngressParameters
    responseElements: dict[str, Any] | None = None


class CreateSecurityGroupDetail(CloudTrailDetail):
    eventName: Literal["CreateSecurityGroup"]
    requestParameters: CreateSecurityGroupParameters
    responseElements: CreateSecurityGroupResponse | None = None


class DeleteSecurityGroupDetail(CloudTrailDetail):
    eventName: Literal["DeleteSecurityGroup"]
    requestParameters: DeleteSecurityGroupParameters
    responseElements: dict[str, Any] | None = None


class ModifyNetworkInterfaceAttributeDetail(CloudTrailDetail):
    eventName: Literal["ModifyNetworkInterfaceAttribute"]
    requestParameters: ModifyNetworkInterfaceAttributeParameters
    responseElements: dict[str, Any] | None = None


class ModifyInstanceAttributeDetail(CloudTrailDetail):
    eventName: Literal["ModifyInstanceAttribute"]
    requestParameters: ModifyInstanceAttributeParameters
    responseElements: dict[str, Any] | None = None


class CreateTagsDetail(CloudTrailDetail):
    eventName: Literal["CreateTags"]
    requestParameters: TagsParameters
    responseElements: dict[str, Any] | None = None


class DeleteTagsDetail(CloudTrailDetail):
    eventName: Literal["DeleteTags"]
    requestParameters: TagsParameters
    responseElements: dict[str, Any] | None = None


class CreateLoadBalancerDetail(CloudTrailDetail):
    eventName: Literal["CreateLoadBalancer"]
    requestParameters: CreateLoadBalancerParameters
    responseElements: CreateLoadBalancerResponse | None = None


class DeleteLoadBalancerDetail(CloudTrailDetail):
    eventName: Literal["DeleteLoadBalancer"]
    requestParameters: LoadBalancerParameters
    responseElements: dict[str, Any] | None = None


class SetSecurityGroupsDetail(CloudTrailDetail):
    eventName: Literal["SetSecurityGroups"]
    requestParameters: SetSecurityGroupsParameters
    responseElements: SetSecurityGroupsResponse | None = None


class SetSubnetsDetail(CloudTrailDetail):
    eventName: Literal["SetSubnets"]
    requestParameters: LoadBalancerParameters
    responseElements: dict[str, Any] | None = None


class SetIpAddressTypeDetail(CloudTrailDetail):
    eventName: Literal["SetIpAddressType"]
    requestParameters: LoadBalancerParameters
    responseElements: dict[str, Any] | None = None


class CreateTargetGroupDetail(CloudTrailDetail):
    eventName: Literal["CreateTargetGroup"]
    requestParameters: CreateTargetGroupParameters
    responseElements: TargetGroupsResponse | None = None


class ModifyTargetGroupDetail(CloudTrailDetail):
    eventName: Literal["ModifyTargetGroup"]
    requestParameters: TargetGroupParameters
    responseElements: TargetGroupsResponse | None = None


class ModifyTargetGroupAttributesDetail(CloudTrailDetail):
    eventName: Literal["ModifyTargetGroupAttributes"]
    requestParameters: TargetGroupParameters
    responseElements: dict[str, Any] | None = None


class DeleteTargetGroupDetail(CloudTrailDetail):
    eventName: Literal["DeleteTargetGroup"]
    requestParameters: TargetGroupParameters
    responseElements: dict[str, Any] | None = None


class CreateListenerDetail(CloudTrailDetail):
    eventName: Literal["CreateListener"]
    requestParameters: CreateListenerParameters
    responseElements: ListenersResponse | None = None


class ModifyListenerDetail(CloudTrailDetail):
    eventName: Literal["ModifyListener"]
    requestParameters: ModifyListenerParameters
    responseElements: ListenersResponse | None = None


class DeleteListenerDetail(CloudTrailDetail):
    eventName: Literal["DeleteListener"]
    requestParameters: ListenerParameters
    responseElements: dict[str, Any] | None = None


class CreateRuleDetail(CloudTrailDetail):
    eventName: Literal["CreateRule"]
    requestParameters: CreateRuleParameters
    responseElements: RulesResponse | None = None


class ModifyRuleDetail(CloudTrailDetail):
    eventName: Literal["ModifyRule"]
    requestParameters: ModifyRuleParameters
    responseElements: RulesResponse | None = None


class DeleteRuleDetail(CloudTrailDetail):
    eventName: Literal["DeleteRule"]
    requestParameters: RuleParameters
    responseElements: dict[str, Any] | None = None


class RegisterTargetsDetail(CloudTrailDetail):
    eventName: Literal["RegisterTargets"]
    requestParameters: TargetsParameters
    responseElements: dict[str, Any] | None = None


class DeregisterTargetsDetail(CloudTrailDetail):
    eventName: Literal["DeregisterTargets"]
    requestParameters: TargetsParameters
    responseElements: dict[str, Any] | None = None


class AddTagsDetail(CloudTrailDetail):
    eventName: Literal["AddTags"]
    requestParameters: AddTagsParameters
    responseElements: dict[str, Any] | None = None


class RemoveTagsDetail(CloudTrailDetail):
    eventName: Literal["RemoveTags"]
    requestParameters: RemoveTagsParameters
    responseElements: dict[str, Any] | None = None


Ec2Detail = (
    AuthorizeSecurityGroupIngressDetail
    | RevokeSecurityGroupIngressDetail
    | ModifySecurityGroupRulesDetail
    | UpdateSecurityGroupRuleDescriptionsIngressDetail
    | CreateSecurityGroupDetail
    | DeleteSecurityGroupDetail
    | ModifyNetworkInterfaceAttributeDetail
    | ModifyInstanceAttributeDetail
    | CreateTagsDetail  # a destination group's tag added or removed (tagged_groups, the LBC's rule)
    | DeleteTagsDetail
)
ElbDetail = (
    CreateLoadBalancerDetail
    | DeleteLoadBalancerDetail
    | SetSecurityGroupsDetail
    | SetSubnetsDetail  # an NLB admitted by address: its subnets carry its health checks
    | SetIpAddressTypeDetail  # dualstack adds the subnets' IPv6 blocks
    | CreateTargetGroupDetail
    | ModifyTargetGroupDetail
    | ModifyTargetGroupAttributesDetail  # client IP preservation decides an addressed NLB's peers
    | DeleteTargetGroupDetail
    | CreateListenerDetail
    | ModifyListenerDetail
    | DeleteListenerDetail
    | CreateRuleDetail
    | ModifyRuleDetail
    | DeleteRuleDetail
    | RegisterTargetsDetail
    | DeregisterTargetsDetail
    | AddTagsDetail
    | RemoveTagsDetail
)
KnownDetail = Annotated[Ec2Detail | ElbDetail, Field(discriminator="eventName")]


def event_names(union: Any) -> tuple[str, ...]:
    """The event names of a union of detail models: each model's Literal eventName."""
    names = []
    for model in get_args(union):
        (name,) = get_args(model.model_fields["eventName"].annotation)
        names.append(name)
    return tuple(names)


# The events the reconciler reacts to: one detail model each, in the union's order.
EC2_EVENT_NAMES: tuple[str, ...] = event_names(Ec2Detail)
ELB_EVENT_NAMES: tuple[str, ...] = event_names(ElbDetail)
EVENT_NAMES: tuple[str, ...] = EC2_EVENT_NAMES + ELB_EVENT_NAMES


# Each event name's detail model: the planner validates a detail with the one its eventName
# routes to (what the discriminated union of CloudTrailEvent does, without building the union).
DETAIL_MODELS: dict[str, type[CloudTrailDetail]] = dict(
    zip(EVENT_NAMES, get_args(Ec2Detail) + get_args(ElbDetail), strict=True)
)


class CloudTrailEvent(EventBridgeEnvelope):
    """A CloudTrail event we react to, its detail parsed by event name."""

    model_config = ConfigDict(defer_build=True)

    detail: KnownDetail
