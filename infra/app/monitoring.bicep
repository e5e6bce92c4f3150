// Log Analytics + Application Insights that accept telemetry only with Microsoft Entra ID
// (DisableLocalAuth): the app authenticates with its identity
// (APPLICATIONINSIGHTS_AUTHENTICATION_STRING), which holds Monitoring Metrics Publisher on
// the component and nothing broader.
param workspaceName string
param appInsightsName string
param location string
param tags object
param identityPrincipalId string
param deployerPrincipalId string = ''
param deployerPrincipalType string = 'User'

// Monitoring Metrics Publisher: send telemetry to the component.
var monitoringMetricsPublisher = '3913510d-42f4-4e42-8a64-420c390055eb'

resource workspace 'Microsoft.OperationalInsights/workspaces@2023-09-01' = {
  name: workspaceName
  location: location
  tags: tags
  properties: {
    sku: {
      name: 'PerGB2018'
    }
    retentionInDays: 30
    features: {
      disableLocalAuth: true
    }
  }
}

resource appInsights 'Microsoft.Insights/components@2020-02-02' = {
  name: appInsightsName
  location: location
  tags: tags
  kind: 'web'
  properties: {
    Application_Type: 'web'
    WorkspaceResourceId: workspace.id
    DisableLocalAuth: true
  }
}

resource appPublishes 'Microsoft.Authorization/roleAssignments@2022-04-01' = {
  name: guid(appInsights.id, identityPrincipalId, monitoringMetricsPublisher)
  scope: appInsights
  properties: {
    roleDefinitionId: subscriptionResourceId('Microsoft.Authorization/roleDefinitions', monitoringMetricsPublisher)
    principalId: identityPrincipalId
    principalType: 'ServicePrincipal'
  }
}

resource deployerPublishes 'Microsoft.Authorization/roleAssignments@2022-04-01' = if (!empty(deployerPrincipalId)) {
  name: guid(appInsights.id, deployerPrincipalId, monitoringMetricsPublisher)
  scope: appInsights
  properties: {
    roleDefinitionId: subscriptionResourceId('Microsoft.Authorization/roleDefinitions', monitoringMetricsPublisher)
    principalId: deployerPrincipalId
    principalType: deployerPrincipalType
  }
}

output appInsightsName string = appInsights.name
output workspaceId string = workspace.id
