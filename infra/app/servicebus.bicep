// The Service Bus namespace and its queues. Local auth is off (Entra ID only) and TLS 1.2 is
// the floor.
//
// Queues: every queue of servicebus.config.json, the local broker's configuration, loaded as
// is, so the two cannot drift; the local demo client's reply queues (REPLY_QUEUES of
// local.settings.sample.json) are left out. Each client app gets its own reply queue, with
// the properties of the local reply queue (R1).
//
// Roles, each on one queue and none on the namespace (least privilege):
// - the queues the app's functions are triggered by (the queues it consumes): Azure Service
//   Bus Data Owner when scaleByQueueLength, else Data Receiver. A role on a queue covers its
//   dead-letter sub-queue (<queue>/$DeadLetterQueue), which the dead-letter watcher peeks and
//   the console's triage receives from. The scale controller reads a queue's length
//   (its runtime properties) only with Manage rights; with Listen rights alone it cannot
//   use the queue length and scales less accurately, and apps have been seen not to wake
//   from zero (Functions docs: "Service Bus trigger" permissions; azure-functions-host#8261).
//   Owner is scoped to those queues only, which the app owns anyway;
// - the queues the app only sends to (operator alerts, the client apps' reply queues) and,
//   with Data Receiver, every queue it consumes (the workflow sends requests and responses;
//   the console resubmits a dead letter to its source queue): Data Sender;
// - each client app's principal: Data Receiver on its own reply queue and Data Sender on the
//   orders queue, nothing else (R1);
// - the deployer (optional): Data Receiver on the app's own queues, to read operator alerts
//   and dead letters (a role on a queue is the narrowest that reaches its dead-letter
//   sub-queue, which is no scope of its own); never on the namespace, which would open every
//   client's reply queue to it (R1).
param name string
param location string
param tags object
@allowed(['Standard', 'Premium'])
param skuName string = 'Standard'
param vnetEnabled bool = false
param identityPrincipalId string
@description('Client apps: objects with name, principalId and replyQueue.')
param clientApps array = []
param scaleByQueueLength bool = true
param deployerPrincipalId string = ''
param deployerPrincipalType string = 'User'

var serviceBusDataOwner = '090c5cfd-751d-490a-894a-3ce6f1109419'
var serviceBusDataReceiver = '4f6d3b9b-027b-4f4c-9142-0e5a2a2247e0'
var serviceBusDataSender = '69a216fc-b8fb-44d8-bc22-1f3c2cd27a39'

var emulatorConfig = any(loadJsonContent('../../servicebus.config.json'))
var localReplyQueues = split(loadJsonContent('../../local.settings.sample.json').Values.REPLY_QUEUES, ',')
var configuredQueues = emulatorConfig.UserConfig.Namespaces[0].Queues
var appQueues = filter(configuredQueues, queue => !contains(localReplyQueues, queue.Name))
var replyQueueTemplate = first(filter(configuredQueues, queue => contains(localReplyQueues, queue.Name)))
var clientReplyQueues = [
  for app in clientApps: {
    Name: app.replyQueue
    Properties: replyQueueTemplate.Properties
  }
]
var replyQueueNames = [for app in clientApps: app.replyQueue]
var queues = concat(appQueues, clientReplyQueues)

// The queue names the app's settings give its triggers and its sends (app-settings.json).
var settings = loadJsonContent('../app-settings.json')
var triggeredQueues = [
  settings.ORDERS_QUEUE
  settings.STOCK_REQUESTS_QUEUE
  settings.PAYMENT_REQUESTS_QUEUE
  settings.SHIPPING_REQUESTS_QUEUE
  settings.AGENT_RESPONSES_QUEUE
]
// The app's own queues: those it consumes and the operator alerts. The app sends to each:
// requests and responses in the workflow, the operator console's dead-letter triage resubmits
// a dead letter to its source queue, orders included (Settings.consumed_queues), and alerts.
// The deployer reads each. No client reply queue is among them.
var appOwnQueues = concat(triggeredQueues, [
  settings.OPERATOR_ALERTS_QUEUE
])
var sentQueues = concat(appOwnQueues, replyQueueNames)
var triggerRole = scaleByQueueLength ? serviceBusDataOwner : serviceBusDataReceiver
// Data Owner already lets the app send to the queues it is triggered by.
var sendOnlyQueues = scaleByQueueLength ? filter(sentQueues, queue => !contains(triggeredQueues, queue)) : sentQueues

resource namespace 'Microsoft.ServiceBus/namespaces@2024-01-01' = {
  name: name
  location: location
  tags: tags
  sku: {
    name: skuName
    tier: skuName
    capacity: skuName == 'Premium' ? 1 : null
  }
  properties: {
    disableLocalAuth: true
    minimumTlsVersion: '1.2'
    publicNetworkAccess: vnetEnabled ? 'Disabled' : 'Enabled'
  }
}

resource queueResources 'Microsoft.ServiceBus/namespaces/queues@2024-01-01' = [
  for queue in queues: {
    parent: namespace
    name: queue.Name
    properties: {
      lockDuration: queue.Properties.?LockDuration ?? 'PT1M'
      maxDeliveryCount: queue.Properties.?MaxDeliveryCount ?? 10
      requiresDuplicateDetection: queue.Properties.?RequiresDuplicateDetection ?? false
      duplicateDetectionHistoryTimeWindow: queue.Properties.?DuplicateDetectionHistoryTimeWindow ?? 'PT10M'
      defaultMessageTimeToLive: queue.Properties.?DefaultMessageTimeToLive
      deadLetteringOnMessageExpiration: queue.Properties.?DeadLetteringOnMessageExpiration ?? false
    }
  }
]

resource triggeredQueueRefs 'Microsoft.ServiceBus/namespaces/queues@2024-01-01' existing = [
  for queueName in triggeredQueues: {
    parent: namespace
    name: queueName
  }
]

resource appReceives 'Microsoft.Authorization/roleAssignments@2022-04-01' = [
  for (queueName, i) in triggeredQueues: {
    name: guid(namespace.id, queueName, identityPrincipalId, triggerRole)
    scope: triggeredQueueRefs[i]
    properties: {
      roleDefinitionId: subscriptionResourceId('Microsoft.Authorization/roleDefinitions', triggerRole)
      principalId: identityPrincipalId
      principalType: 'ServicePrincipal'
    }
    dependsOn: [
      queueResources
    ]
  }
]

resource sendOnlyQueueRefs 'Microsoft.ServiceBus/namespaces/queues@2024-01-01' existing = [
  for queueName in sendOnlyQueues: {
    parent: namespace
    name: queueName
  }
]

resource appSends 'Microsoft.Authorization/roleAssignments@2022-04-01' = [
  for (queueName, i) in sendOnlyQueues: {
    name: guid(namespace.id, queueName, identityPrincipalId, serviceBusDataSender)
    scope: sendOnlyQueueRefs[i]
    properties: {
      roleDefinitionId: subscriptionResourceId('Microsoft.Authorization/roleDefinitions', serviceBusDataSender)
      principalId: identityPrincipalId
      principalType: 'ServicePrincipal'
    }
    dependsOn: [
      queueResources
    ]
  }
]

resource clientReplyQueueRefs 'Microsoft.ServiceBus/namespaces/queues@2024-01-01' existing = [
  for app in clientApps: {
    parent: namespace
    name: app.replyQueue
  }
]

resource clientReceivesReplies 'Microsoft.Authorization/roleAssignments@2022-04-01' = [
  for (app, i) in clientApps: {
    name: guid(namespace.id, app.replyQueue, app.principalId, serviceBusDataReceiver)
    scope: clientReplyQueueRefs[i]
    properties: {
      roleDefinitionId: subscriptionResourceId('Microsoft.Authorization/roleDefinitions', serviceBusDataReceiver)
      principalId: app.principalId
    }
    dependsOn: [
      queueResources
    ]
  }
]

resource ordersQueueRef 'Microsoft.ServiceBus/namespaces/queues@2024-01-01' existing = {
  parent: namespace
  name: settings.ORDERS_QUEUE
}

resource clientSendsOrders 'Microsoft.Authorization/roleAssignments@2022-04-01' = [
  for app in clientApps: {
    name: guid(namespace.id, settings.ORDERS_QUEUE, app.principalId, serviceBusDataSender)
    scope: ordersQueueRef
    properties: {
      roleDefinitionId: subscriptionResourceId('Microsoft.Authorization/roleDefinitions', serviceBusDataSender)
      principalId: app.principalId
    }
    dependsOn: [
      queueResources
    ]
  }
]

// The queues the deployer reads: the app's own, none without a deployer.
var deployerQueues = empty(deployerPrincipalId) ? [] : appOwnQueues

resource deployerQueueRefs 'Microsoft.ServiceBus/namespaces/queues@2024-01-01' existing = [
  for queueName in deployerQueues: {
    parent: namespace
    name: queueName
  }
]

resource deployerReads 'Microsoft.Authorization/roleAssignments@2022-04-01' = [
  for (queueName, i) in deployerQueues: {
    name: guid(namespace.id, queueName, deployerPrincipalId, serviceBusDataReceiver)
    scope: deployerQueueRefs[i]
    properties: {
      roleDefinitionId: subscriptionResourceId('Microsoft.Authorization/roleDefinitions', serviceBusDataReceiver)
      principalId: deployerPrincipalId
      principalType: deployerPrincipalType
    }
    dependsOn: [
      queueResources
    ]
  }
]

output id string = namespace.id
output name string = namespace.name
output fullyQualifiedNamespace string = split(replace(namespace.properties.serviceBusEndpoint, 'https://', ''), ':')[0]
output ordersQueue string = settings.ORDERS_QUEUE
