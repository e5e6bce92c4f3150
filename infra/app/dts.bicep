// The Durable Task Scheduler that runs the app's orchestrations (D2, C7): a Consumption
// scheduler and one task hub. The app reaches it with its identity
// (DURABLE_TASK_SCHEDULER_CONNECTION_STRING, Authentication=ManagedIdentity) and holds Durable
// Task Data Contributor on its task hub only.
param name string
param taskHubName string
param location string
param tags object
param identityPrincipalId string
param deployerPrincipalId string = ''
param deployerPrincipalType string = 'User'

// Durable Task Data Contributor: run orchestrations and activities of the task hub.
var durableTaskDataContributor = '0ad04412-c4d5-4796-b79c-f76d14c8d402'

resource scheduler 'Microsoft.DurableTask/schedulers@2025-11-01' = {
  name: name
  location: location
  tags: tags
  properties: {
    // Identity, not network, guards the scheduler: an empty list would refuse every caller.
    ipAllowlist: [
      '0.0.0.0/0'
    ]
    sku: {
      name: 'Consumption'
    }
  }
}

resource taskHub 'Microsoft.DurableTask/schedulers/taskHubs@2025-11-01' = {
  parent: scheduler
  name: taskHubName
  properties: {}
}

resource appRunsTaskHub 'Microsoft.Authorization/roleAssignments@2022-04-01' = {
  name: guid(taskHub.id, identityPrincipalId, durableTaskDataContributor)
  scope: taskHub
  properties: {
    roleDefinitionId: subscriptionResourceId('Microsoft.Authorization/roleDefinitions', durableTaskDataContributor)
    principalId: identityPrincipalId
    principalType: 'ServicePrincipal'
  }
}

// The deployer sees the orchestrations in the scheduler's dashboard.
resource deployerRunsTaskHub 'Microsoft.Authorization/roleAssignments@2022-04-01' = if (!empty(deployerPrincipalId)) {
  name: guid(taskHub.id, deployerPrincipalId, durableTaskDataContributor)
  scope: taskHub
  properties: {
    roleDefinitionId: subscriptionResourceId('Microsoft.Authorization/roleDefinitions', durableTaskDataContributor)
    principalId: deployerPrincipalId
    principalType: deployerPrincipalType
  }
}

output endpoint string = scheduler.properties.endpoint
output taskHubName string = taskHub.name
