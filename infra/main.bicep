// The Azure deployment of the order-processing app (`azd up`): a Flex Consumption function app
// with one user-assigned identity that reaches every service with Microsoft Entra ID, never a
// key (no listKeys, no connection string with a secret, local auth off everywhere).
//
// - Service Bus: every queue of servicebus.config.json (one source of truth with the local
//   broker) and one private reply queue per client app (R1, R2).
// - Cosmos DB: the state store, orders database and deadline index (S2, U3), created from
//   cosmos-containers.json, which is what adapters/cosmos_containers.py defines.
// - Durable Functions on the Durable Task Scheduler (or, as an option, on Azure Storage).
// - Log Analytics + Application Insights with Entra-only ingestion, the app's OpenTelemetry
//   sent there by the worker's Azure Monitor distro, and operator alerts (alerts.bicep).
// - App Service authentication with Entra ID in front of the operator console when
//   consoleAuthClientId names its app registration (function.bicep).
// - Optionally a virtual network with private endpoints (vnetEnabled).
targetScope = 'subscription'

@minLength(1)
@maxLength(64)
@description('Name of the azd environment: part of every resource name, and a tag on each.')
param environmentName string

// The regions where all three services this deployment cannot do without exist, so that
// provisioning never stops halfway on a resource its region lacks: the Flex Consumption plan
// (the regions of Microsoft's Flex Consumption azd quickstart,
// Azure-Samples/functions-quickstart-python-http-azd, which `az functionapp
// list-flexconsumption-locations` lists; learn.microsoft.com/azure/azure-functions/
// flex-consumption-how-to#view-currently-supported-regions), the Durable Task Scheduler (the
// regions of Microsoft's Durable Task Scheduler samples, Azure-Samples/Durable-Task-Scheduler;
// `az provider show --namespace Microsoft.DurableTask`, learn.microsoft.com/azure/durable-task/
// scheduler/durable-task-scheduler#supported-regions) and serverless Cosmos DB
// (learn.microsoft.com/azure/cosmos-db/serverless). Add a region once both commands list it.
@minLength(1)
@allowed([
  'australiaeast'
  'eastasia'
  'eastus'
  'eastus2'
  'northeurope'
  'southcentralus'
  'southeastasia'
  'swedencentral'
  'uksouth'
  'westus2'
])
@metadata({
  azd: {
    type: 'location'
  }
})
@description('Region of every resource.')
param location string

@description('Object id of the deploying user or principal: given the operator roles (optional).')
param principalId string = ''

@allowed(['User', 'ServicePrincipal', 'Group'])
@description('Kind of principal principalId names.')
param principalType string = 'User'

@description('Client apps that submit orders, as "name=principalObjectId" pairs separated by commas. Each gets the reply queue "<name>-replies", which only its principal may read; it may send to the orders queue (R1).')
param clientApps string = ''

@description('Base URL of the remote stock service (STOCK_SERVICE_URL).')
param stockServiceUrl string = ''

@description('Base URL of the remote payment service (PAYMENT_SERVICE_URL).')
param paymentServiceUrl string = ''

@description('Base URL of the remote shipping service (SHIPPING_SERVICE_URL).')
param shippingServiceUrl string = ''

@allowed([512, 2048, 4096])
@description('Memory of one Flex Consumption instance, in MB.')
param instanceMemoryMB int = 2048

@minValue(40)
@maxValue(1000)
@description('Most instances the app scales out to.')
param maximumInstanceCount int = 100

@minValue(0)
@maxValue(10)
@description('Always-ready instances for the durable group and for each Service Bus-triggered function; 0 turns them off (cold starts after idle).')
param alwaysReadyInstances int = 0

@description('Put the app in a virtual network and reach storage, Service Bus (Premium) and Cosmos DB through private endpoints only.')
param vnetEnabled bool = false

@allowed(['dts', 'azureStorage'])
@description('Durable Functions backend: the Durable Task Scheduler, or Azure Storage queues and tables.')
param durableBackend string = 'dts'

@allowed(['Standard', 'Premium'])
@description('Service Bus tier; vnetEnabled always uses Premium, the only tier with private endpoints.')
param serviceBusSku string = 'Standard'

@description('Cosmos DB in serverless mode; false provisions autoscale throughput on the database.')
param cosmosServerless bool = true

@description('E-mail address of the operators the alerts go to (dead letters, orders in Error or CompensationFailed, an old Pending order, supervisor give-ups); empty creates the alert rules without notifying anyone.')
param alertEmail string = ''

@minValue(60)
@description('Age in seconds above which the oldest Pending order raises an alert.')
param oldestPendingAlertSeconds int = 900

@description('Give the app Data Owner (Manage) on the queues its functions are triggered by, so that the scale controller reads queue lengths; false gives Data Receiver only (less accurate scaling).')
param serviceBusScaleByQueueLength bool = true

@description('Client id of the operator console\'s Entra app registration (docs/console.md, "Auth on Azure"). Set, the function app requires an Entra ID sign-in or access token for it before the function key; empty, the console relies on function keys alone.')
param consoleAuthClientId string = ''

@description('Object id of the Entra group whose members may use the operator console (with consoleAuthClientId).')
param consoleOperatorsGroupId string = ''

@description('Object ids of further users or service principals that may use the operator console, separated by commas (with consoleAuthClientId).')
param consoleOperatorPrincipalIds string = ''

@description('The operator console\'s named keys when consoleAuthClientId is empty: comma-separated name:role:sha256 entries, role read or act, the SHA-256 of each key (docs/console.md). Hashes only, never keys.')
param consoleKeys string = ''

@minValue(1)
@description('Active messages on a queue the app consumes above which the consumer-lag alert fires.')
param consumerLagAlertMessages int = 1000

var abbrs = loadJsonContent('./abbreviations.json')
var resourceToken = toLower(uniqueString(subscription().id, environmentName, location))
var tags = {
  'azd-env-name': environmentName
}
var functionAppName = '${abbrs.webSitesFunctions}api-${resourceToken}'
var deploymentContainerName = 'app-package-${resourceToken}'
var useDts = durableBackend == 'dts'

// "name=principalObjectId,name=principalObjectId" -> one entry per client app (R1). The
// deployer, when given, is one more client named smokeClientName: the postdeploy smoke test
// (tools/smoke) sends its order as the deployer and reads the statuses from a reply queue of
// its own, so it needs Data Sender on the orders queue and Data Receiver on that queue only.
var smokeClientName = 'smoke'
var declaredClientAppEntries = filter(split(clientApps, ','), entry => !empty(trim(entry)))
var smokeClientEntries = empty(principalId) ? [] : ['${smokeClientName}=${principalId}']
var clientAppEntries = concat(declaredClientAppEntries, smokeClientEntries)
var clientAppList = [
  for entry in clientAppEntries: {
    name: trim(split(entry, '=')[0])
    principalId: trim(split(entry, '=')[1])
    replyQueue: '${trim(split(entry, '=')[0])}-replies'
  }
]
var replyQueueNames = [for app in clientAppList: app.replyQueue]
var consoleOperatorGroupIds = empty(trim(consoleOperatorsGroupId)) ? [] : [trim(consoleOperatorsGroupId)]
var consoleOperatorPrincipalIdList = [
  for entry in filter(split(consoleOperatorPrincipalIds, ','), entry => !empty(trim(entry))): trim(entry)
]

resource rg 'Microsoft.Resources/resourceGroups@2024-03-01' = {
  name: '${abbrs.resourcesResourceGroups}${environmentName}'
  location: location
  tags: tags
}

module identity 'app/identity.bicep' = {
  name: 'identity'
  scope: rg
  params: {
    name: '${abbrs.managedIdentityUserAssignedIdentities}api-${resourceToken}'
    location: location
    tags: tags
  }
}

module monitoring 'app/monitoring.bicep' = {
  name: 'monitoring'
  scope: rg
  params: {
    workspaceName: '${abbrs.operationalInsightsWorkspaces}${resourceToken}'
    appInsightsName: '${abbrs.insightsComponents}${resourceToken}'
    location: location
    tags: tags
    identityPrincipalId: identity.outputs.principalId
    deployerPrincipalId: principalId
    deployerPrincipalType: principalType
  }
}

module storage 'app/storage.bicep' = {
  name: 'storage'
  scope: rg
  params: {
    name: '${abbrs.storageStorageAccounts}${resourceToken}'
    location: location
    tags: tags
    deploymentContainerName: deploymentContainerName
    identityPrincipalId: identity.outputs.principalId
    durableOnStorage: !useDts
    vnetEnabled: vnetEnabled
  }
}

module dts 'app/dts.bicep' = if (useDts) {
  name: 'dts'
  scope: rg
  params: {
    name: '${abbrs.durableTaskSchedulers}${resourceToken}'
    taskHubName: '${abbrs.durableTaskHubs}${resourceToken}'
    location: location
    tags: tags
    identityPrincipalId: identity.outputs.principalId
    deployerPrincipalId: principalId
    deployerPrincipalType: principalType
  }
}

module serviceBus 'app/servicebus.bicep' = {
  name: 'servicebus'
  scope: rg
  params: {
    name: '${abbrs.serviceBusNamespaces}${resourceToken}'
    location: location
    tags: tags
    skuName: vnetEnabled ? 'Premium' : serviceBusSku
    vnetEnabled: vnetEnabled
    identityPrincipalId: identity.outputs.principalId
    clientApps: clientAppList
    scaleByQueueLength: serviceBusScaleByQueueLength
    deployerPrincipalId: principalId
    deployerPrincipalType: principalType
  }
}

module cosmos 'app/cosmos.bicep' = {
  name: 'cosmos'
  scope: rg
  params: {
    name: '${abbrs.documentDBDatabaseAccounts}${resourceToken}'
    location: location
    tags: tags
    serverless: cosmosServerless
    vnetEnabled: vnetEnabled
    identityPrincipalId: identity.outputs.principalId
    deployerPrincipalId: principalId
  }
}

module network 'app/network.bicep' = if (vnetEnabled) {
  name: 'network'
  scope: rg
  params: {
    vnetName: '${abbrs.networkVirtualNetworks}${resourceToken}'
    endpointPrefix: '${abbrs.networkPrivateEndpoints}${resourceToken}'
    location: location
    tags: tags
    storageAccountId: storage.outputs.id
    durableOnStorage: !useDts
    serviceBusNamespaceId: serviceBus.outputs.id
    cosmosAccountId: cosmos.outputs.id
  }
}

module alerts 'app/alerts.bicep' = {
  name: 'alerts'
  scope: rg
  params: {
    namePrefix: 'alert-${resourceToken}'
    location: location
    tags: tags
    serviceBusNamespaceName: serviceBus.outputs.name
    appInsightsName: monitoring.outputs.appInsightsName
    alertEmail: alertEmail
    oldestPendingSeconds: oldestPendingAlertSeconds
    consumerLagMessages: consumerLagAlertMessages
  }
}

module functionApp 'app/function.bicep' = {
  name: 'function'
  scope: rg
  params: {
    name: functionAppName
    planName: '${abbrs.webServerFarms}${resourceToken}'
    location: location
    tags: tags
    identityId: identity.outputs.id
    identityClientId: identity.outputs.clientId
    storageAccountName: storage.outputs.name
    deploymentContainerName: deploymentContainerName
    appInsightsName: monitoring.outputs.appInsightsName
    serviceBusNamespaceFqdn: serviceBus.outputs.fullyQualifiedNamespace
    cosmosEndpoint: cosmos.outputs.endpoint
    durableBackend: durableBackend
    dtsEndpoint: useDts ? dts.outputs.endpoint : ''
    taskHubName: useDts ? dts.outputs.taskHubName : ''
    replyQueues: join(replyQueueNames, ',')
    stockServiceUrl: stockServiceUrl
    paymentServiceUrl: paymentServiceUrl
    shippingServiceUrl: shippingServiceUrl
    instanceMemoryMB: instanceMemoryMB
    maximumInstanceCount: maximumInstanceCount
    alwaysReadyInstances: alwaysReadyInstances
    subnetId: vnetEnabled ? network.outputs.appSubnetId : ''
    consoleAuthClientId: consoleAuthClientId
    consoleOperatorGroupIds: consoleOperatorGroupIds
    consoleOperatorPrincipalIds: consoleOperatorPrincipalIdList
    consoleKeys: consoleKeys
  }
}

output AZURE_LOCATION string = location
output AZURE_TENANT_ID string = tenant().tenantId
output AZURE_RESOURCE_GROUP string = rg.name
output AZURE_FUNCTION_NAME string = functionApp.outputs.name
output SERVICE_API_NAME string = functionApp.outputs.name
output SERVICEBUS_FULLY_QUALIFIED_NAMESPACE string = serviceBus.outputs.fullyQualifiedNamespace
output ORDERS_QUEUE string = serviceBus.outputs.ordersQueue
output CLIENT_REPLY_QUEUES string = join(replyQueueNames, ',')
// The reply queue of the postdeploy smoke test, empty without a deployer (azure.yaml).
output SMOKE_REPLY_QUEUE string = empty(principalId) ? '' : '${smokeClientName}-replies'
output COSMOS_ENDPOINT string = cosmos.outputs.endpoint
// Where the predeploy replay gate reads the instances in flight (azure.yaml); empty on the
// Azure Storage backend, whose histories the gate cannot read.
output DURABLE_TASK_SCHEDULER_ENDPOINT string = useDts ? dts.outputs.endpoint : ''
output TASKHUB_NAME string = useDts ? dts.outputs.taskHubName : ''
// The app's URL, as the console's CLI takes it (CONSOLE_URL); the page is <url>/api/console.
output CONSOLE_URL string = 'https://${functionApp.outputs.defaultHostName}'
output CONSOLE_AUTH_ENABLED bool = functionApp.outputs.consoleAuthEnabled
